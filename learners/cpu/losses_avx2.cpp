// The loss kernel compiled with -mavx2 (see loss_kernel.h); cpu_learner.cpp calls it
// when the CPU has AVX2 but not AVX-512.
#include "learners/cpu/loss_kernel.h"

namespace crl::learners::cpu::detail {

LossResult losses_avx2(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                       const LearnerOptions& options, TokenRange range, Gradients* gradients) {
  return loss_kernel(batch, advantages, normalizer, options, range, gradients);
}

}  // namespace crl::learners::cpu::detail
