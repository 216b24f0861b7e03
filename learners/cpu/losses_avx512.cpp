// The loss kernel and the fused step compiled with -mavx512f (see loss_kernel.h): 8 doubles per vector;
// cpu_learner.cpp calls them when the CPU has AVX-512F and DQ.
#include "learners/cpu/loss_kernel.h"

namespace crl::learners::cpu::detail {

LossResult losses_avx512(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                         const LearnerOptions& options, TokenRange range, Gradients* gradients) {
  return loss_kernel(batch, advantages, normalizer, options, range, gradients);
}

LossResult step_avx512(const Batch& batch, const LearnerOptions& options, const SegmentSweep* plan,
                       const LossNormalizer& normalizer, Advantages& out, Gradients* gradients, bool stream) {
  return fused_kernel(batch, options, plan, normalizer, out, gradients, stream);
}

}  // namespace crl::learners::cpu::detail
