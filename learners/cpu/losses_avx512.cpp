// The loss kernel compiled with -mavx512f (see loss_kernel.h): 8 doubles per vector;
// cpu_learner.cpp calls it when the CPU has AVX-512F and DQ.
#include "learners/cpu/loss_kernel.h"

namespace crl::learners::cpu::detail {

LossResult losses_avx512(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                         const LearnerOptions& options, TokenRange range, Gradients* gradients) {
  return loss_kernel(batch, advantages, normalizer, options, range, gradients);
}

}  // namespace crl::learners::cpu::detail
