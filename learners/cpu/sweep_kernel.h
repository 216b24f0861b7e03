#pragma once
// The estimator's token sweep (learner.h steps 3-5), alone or fused with the losses (step 6): compiled once
// per instruction set like the loss kernel (isa_kernels.h), internal linkage, the same bits in every copy.
//
// Fused, each segment is finished and run through the loss blocks right after the lanes have swept it, while
// its tokens are still in cache, so a step reads each input array from memory once and writes each output
// array once. Segments are finished in order, in the loss kernel's blocks: the same additions as the
// separate loss pass over the whole batch, so the fused step gives the same bits as advantages() followed by
// losses().
#include <algorithm>
#include <cstdint>

#include "learners/cpu/gae_sweep.h"
#include "learners/cpu/isa_kernels.h"
#include "learners/cpu/loss_kernel.h"

namespace crl::learners::cpu {
namespace {

using detail::SweepInputs;

// Advantages and returns of tokens [0, n) of one segment from the raw sweep state left in place (learner.h
// step 5): adv holds a, ret holds corr (stitched target) on entry.
//   sampled:   advantage = factor a (0 under positive-only), return = (ret_scale a + corr) + V;
//   unsampled: advantage 0, return V.
// The expressions of the serial sweep; no chain, so the loop vectorizes. The masks are compared as doubles so
// that the selects are vector masks of doubles.
template <bool kStitched>
inline void finish_tokens(const SegmentSweep& p, int64_t n, const double* __restrict values,
                          const uint8_t* __restrict critic, double* adv, double* ret) {
  const double factor = p.factor, ret_scale = p.ret_scale;
  const double keep = p.zero_advantage ? 0.0 : 1.0;
  for (int64_t i = 0; i < n; ++i) {
    const double m = static_cast<double>(critic[i]);
    const double a = adv[i];
    const double c = kStitched ? ret[i] : 0.0;
    const double sampled_adv = factor * a;
    const double sampled_ret = ret_scale * a + c + values[i];
    adv[i] = m * keep != 0.0 ? sampled_adv : 0.0;
    ret[i] = m != 0.0 ? sampled_ret : values[i];
  }
}

template <bool kStitched>
LossResult sweep_kernel(const SweepInputs& in, Advantages& out, Gradients* gradients) {
  const Batch& batch = *in.batch;
  const int64_t num_segments = batch.num_segments();
  const int64_t num_tokens = batch.num_tokens();
  const double* values = batch.values.data();
  const uint8_t* critic = batch.critic_mask.data();
  const int64_t* offsets = batch.segment_offsets.data();
  double* adv = out.advantages.data();
  double* ret = out.returns.data();
  const LearnerOptions& options = *in.options;
  const bool with_losses = in.normalizer != nullptr;
  const LossArrays arrays = loss_arrays(batch, out, gradients);
  const LossBlockFn loss_block_fn = with_losses ? pick_block(batch, options) : nullptr;
  LossSums sums;
  int64_t finished = 0;  // segments [0, finished) are final
  // Segments [finished, s_end) have been swept: finish them front to back in the loss kernel's blocks
  // (aligned to each segment's first token), so that the sums are added as the separate loss pass adds them.
  auto finish_segments = [&](int64_t s_end) {
    for (; finished < s_end; ++finished) {
      const int64_t s = finished;
      const SegmentSweep& p = in.plan[s];
      const double wa =
          with_losses && !(options.summary_loss_masked && batch.segment_kind[s] == SegmentKind::kSummary)
              ? in.normalizer->actor_scale[s]
              : 0.0;
      const double wc = with_losses ? in.normalizer->critic_scale[s] : 0.0;
      for (int64_t t = offsets[s]; t < offsets[s + 1]; t += kBlock) {
        const int64_t n = std::min(kBlock, offsets[s + 1] - t);
        finish_tokens<kStitched>(p, n, values + t, critic + t, adv + t, ret + t);
        if (!with_losses) continue;
        if (t + n < num_tokens) prefetch_block(arrays, t + n, std::min(kBlock, num_tokens - t - n), true);
        alignas(64) double scratch_lp[kBlock], scratch_v[kBlock];  // gradients nobody asked for
        add_block(sums, loss_block_fn(at(arrays, t), options, n, wa, wc,
                                      gradients ? arrays.grad_lp + t : scratch_lp,
                                      gradients ? arrays.grad_v + t : scratch_v));
      }
    }
  };
  sweep_segments<kStitched>(values, critic, offsets, num_segments, in.plan, adv, ret, finish_segments);
  return with_losses ? loss_result(sums, options) : LossResult{};
}

// The sweep for the options: the stitched target needs the lanes to carry its correction too.
LossResult sweep_kernel(const SweepInputs& in, Advantages& out, Gradients* gradients) {
  return in.options->critic_target == CriticTarget::kStitched ? sweep_kernel<true>(in, out, gradients)
                                                              : sweep_kernel<false>(in, out, gradients);
}

}  // namespace
}  // namespace crl::learners::cpu

// Defines the entry points of isa_kernels.h for one instruction set, in the translation unit compiled for it.
#define CRL_DEFINE_CPU_KERNELS(isa)                                                                          \
  namespace crl::learners::cpu::detail {                                                                     \
  LossResult losses_##isa(const Batch& batch, const Advantages& advantages,                                  \
                          const LossNormalizer& normalizer, const LearnerOptions& options, TokenRange range, \
                          Gradients* gradients) {                                                            \
    return loss_kernel(batch, advantages, normalizer, options, range, gradients);                            \
  }                                                                                                          \
  LossResult sweep_##isa(const SweepInputs& in, Advantages& out, Gradients* gradients) {                     \
    return sweep_kernel(in, out, gradients);                                                                 \
  }                                                                                                          \
  }
