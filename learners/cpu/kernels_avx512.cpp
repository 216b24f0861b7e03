// The CPU kernels (isa_kernels.h) compiled with -mavx512f (8 doubles per vector); cpu_learner.cpp calls them
// when the CPU has AVX-512F, DQ, VL and BW.
#include "learners/cpu/sweep_kernel.h"

namespace crl::learners::cpu::detail {

LossResult losses_avx512(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                         const LearnerOptions& options, TokenRange range, Gradients* gradients) {
  return loss_kernel(batch, advantages, normalizer, options, range, gradients);
}

LossResult sweep_avx512(const SweepInputs& in, Advantages& out, Gradients* gradients) {
  return sweep_kernel(in, out, gradients);
}

}  // namespace crl::learners::cpu::detail
