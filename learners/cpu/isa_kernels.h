#pragma once
// The CPU kernels compiled once per instruction set: cpu_learner.cpp (baseline x86-64 / any CPU),
// kernels_avx2.cpp (-mavx2) and kernels_avx512.cpp (-mavx512f), the widest the CPU has being chosen at run
// time (cpu_learner.cpp). All copies give the same bits (tests/learners/isa_kernels_test.cpp).
#include "learners/cpu/gae_sweep.h"
#include "learners/learner.h"

namespace crl::learners::cpu::detail {

// What a sweep needs besides the batch, fixed at segment level by cpu_learner.cpp.
struct SweepInputs {
  const Batch* batch = nullptr;
  const LearnerOptions* options = nullptr;
  const SegmentSweep* plan = nullptr;          // one per segment
  const LossNormalizer* normalizer = nullptr;  // null: advantages and returns only; else the fused step
};

#define CRL_DECLARE_CPU_KERNELS(isa)                                                                         \
  LossResult losses_##isa(const Batch& batch, const Advantages& advantages,                                  \
                          const LossNormalizer& normalizer, const LearnerOptions& options, TokenRange range, \
                          Gradients* gradients);                                                             \
  /* Fills out.advantages and out.returns (sized by the caller); with a normalizer also the losses and   */  \
  /* gradients of the whole batch. */                                                                        \
  LossResult sweep_##isa(const SweepInputs& in, Advantages& out, Gradients* gradients);

CRL_DECLARE_CPU_KERNELS(generic)
CRL_DECLARE_CPU_KERNELS(avx2)
CRL_DECLARE_CPU_KERNELS(avx512)
#undef CRL_DECLARE_CPU_KERNELS

}  // namespace crl::learners::cpu::detail
