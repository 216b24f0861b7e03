#pragma once
// The CPU loss kernel (learner.h step 6), included by the translation units that compile the kernels once
// per instruction set (isa_kernels.h). Everything here has internal linkage and calls no library function,
// so the copies never mix and give bit-identical results: the exponential is our own (below),
// floating-point contraction is off in all, and no loop reassociates a sum.
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "learners/cpu/doubles8.h"
#include "learners/cpu/kernel_exp.h"
#include "learners/learner.h"

namespace crl::learners::cpu {

namespace {

struct LossSums {
  double policy = 0.0, kl = 0.0, value = 0.0, clipped = 0.0, vclipped = 0.0;
};

// Token arrays of one loss call (optional arrays already replaced by their defaults).
struct LossArrays {
  const double *old_lp, *new_lp, *ref_lp, *old_v, *new_v, *adv, *ret;
  const uint8_t *actor, *critic;
  double *grad_lp, *grad_v;
};

// Tokens per inner block: per-token loss terms go to stack buffers of this size, then are summed.
constexpr int64_t kBlock = 256;

// Per-block sums of the loss terms (one block = up to kBlock tokens of one segment).
struct BlockSums {
  double policy = 0.0, kl = 0.0, value = 0.0, clipped = 0.0, vclipped = 0.0;
};

// Adds one block's sums to the running totals, in token order.
inline void add_block(LossSums& sums, const BlockSums& b) {
  sums.policy += b.policy;
  sums.clipped += b.clipped;
  sums.value += b.value;
  sums.kl += b.kl;
  sums.vclipped += b.vclipped;
}

// The arrays of `in` advanced to token t.
inline LossArrays at(const LossArrays& in, int64_t t) {
  LossArrays out = in;
  out.old_lp += t;
  out.new_lp += t;
  out.ref_lp += t;
  out.old_v += t;
  out.new_v += t;
  out.adv += t;
  out.ret += t;
  out.actor += t;
  out.critic += t;
  return out;
}

// The loss block's sums, eight lanes each.
struct BlockSums8 {
  Sum8 policy, clipped, kl, value, vclipped;
};

struct LossParams {
  Vec lo, hi, vclip;
  double kl_coef;
};

// The loss terms of kNativeWidth tokens starting at `in` (see loss_block), added to lanes `part` of `sums`;
// gradients to glp[0..width) and gval[0..width).
template <bool kLogprobs, bool kKl, bool kValueClip>
inline void token_terms(const LossArrays& in, double wa, double wc, const LossParams& p, int part,
                        BlockSums8& sums, double* glp, double* gval) {
  const Vec zero{};
  // Actor: l = -min(rho A, clip(rho, 1-eps, 1+eps) A), rho = exp(log pi - log pi_old). Its derivative
  // in log pi is -rho A on the unclipped branch and 0 on the clipped one (ties take the unclipped branch,
  // where both agree).
  const Vec w = wa * load_mask(in.actor);
  const Vec a = load_vec(in.adv);
  Vec r = splat(1.0);
  Vec new_lp{};
  if constexpr (kLogprobs) {
    new_lp = load_vec(in.new_lp);
    r = kernel_exp(new_lp - load_vec(in.old_lp));
  }
  const Vec unclipped = r * a;
  const Vec r_clip = r < p.lo ? p.lo : (r > p.hi ? p.hi : r);
  const Vec clipped_obj = r_clip * a;
  const VecMask take_unclipped = unclipped <= clipped_obj;
  sums.policy.add(part, w * -(take_unclipped ? unclipped : clipped_obj));
  sums.clipped.add(part, take_unclipped ? zero : w);
  Vec g = take_unclipped ? -unclipped : zero;
  if constexpr (kKl) {
    // k3 = exp(d) - d - 1 with d = log pi_ref - log pi; d k3 / d log pi = 1 - exp(d).
    const Vec d = load_vec(in.ref_lp) - new_lp;
    const Vec e = kernel_exp(d);
    sums.kl.add(part, w * (e - d - 1.0));
    g += p.kl_coef * (1.0 - e);
  }
  // Critic: (V - G)^2, or with clipping max((V - G)^2, (V_clip - G)^2), V_clip = V_old + clip(V - V_old).
  const Vec wv = wc * load_mask(in.critic);
  const Vec new_v = load_vec(in.new_v), ret = load_vec(in.ret);
  const Vec diff = new_v - ret;
  Vec loss_v = diff * diff;
  Vec gv = 2.0 * diff;
  if constexpr (kValueClip) {
    const Vec old_v = load_vec(in.old_v);
    const Vec delta = new_v - old_v;
    const Vec delta_c = delta < -p.vclip ? -p.vclip : (delta > p.vclip ? p.vclip : delta);
    const Vec diff_c = old_v + delta_c - ret;
    const VecMask take_clipped = diff_c * diff_c > loss_v;
    const VecMask inside = (delta < 0.0 ? -delta : delta) < p.vclip;
    gv = take_clipped ? (inside ? 2.0 * diff_c : zero) : gv;
    loss_v = take_clipped ? diff_c * diff_c : loss_v;
    sums.vclipped.add(part, take_clipped ? wv : zero);
  }
  sums.value.add(part, wv * loss_v);
  store_vec(glp, w * g);
  store_vec(gval, wv * gv);
}

// The losses of one block of n <= kBlock tokens of one segment (actor weight wa, critic weight wc per masked
// token). `in` points at the block's first token. Groups of eight tokens in native vectors, the sums in
// eight lanes (doubles8.h); the last group is copied into zero-padded buffers, whose terms are +-0 with
// weight 0 and leave every sum as it is (a sum that starts at +0 never becomes -0). Gradients go to glp /
// gval (length n).
template <bool kLogprobs, bool kKl, bool kValueClip>
BlockSums loss_block(const LossArrays& in, const LearnerOptions& o, int64_t n, double wa, double wc,
                     double* __restrict glp, double* __restrict gval) {
  LossParams p;
  p.lo = splat(1.0 - o.clip_epsilon);
  p.hi = splat(1.0 + o.clip_epsilon);
  p.vclip = splat(o.value_clip);
  p.kl_coef = o.kl_coef;
  BlockSums8 sums;
  sums.policy.clear();
  sums.clipped.clear();
  sums.kl.clear();
  sums.value.clear();
  sums.vclipped.clear();
  int64_t i = 0;
  // Two groups of eight per iteration: two independent exponential chains in flight.
  for (; i + 2 * kSumLanes <= n; i += 2 * kSumLanes) {
    for (int u = 0; u < 2 * kSumParts; ++u) {
      const int64_t t = i + u * kNativeWidth;
      token_terms<kLogprobs, kKl, kValueClip>(at(in, t), wa, wc, p, u % kSumParts, sums, glp + t, gval + t);
    }
  }
  for (; i + kSumLanes <= n; i += kSumLanes) {
    for (int part = 0; part < kSumParts; ++part) {
      const int64_t t = i + part * kNativeWidth;
      token_terms<kLogprobs, kKl, kValueClip>(at(in, t), wa, wc, p, part, sums, glp + t, gval + t);
    }
  }
  if (i < n) {
    // The last m < 8 tokens, from zero-padded copies.
    const int64_t m = n - i;
    alignas(64) double pad[7][kSumLanes] = {};
    alignas(64) uint8_t pad_mask[2][kSumLanes] = {};
    alignas(64) double pad_glp[kSumLanes], pad_gval[kSumLanes];
    const LossArrays src = at(in, i);
    for (int64_t k = 0; k < m; ++k) {
      pad[0][k] = src.old_lp[k];
      pad[1][k] = src.new_lp[k];
      pad[2][k] = src.ref_lp[k];
      pad[3][k] = src.old_v[k];
      pad[4][k] = src.new_v[k];
      pad[5][k] = src.adv[k];
      pad[6][k] = src.ret[k];
      pad_mask[0][k] = src.actor[k];
      pad_mask[1][k] = src.critic[k];
    }
    LossArrays padded{};
    padded.old_lp = pad[0];
    padded.new_lp = pad[1];
    padded.ref_lp = pad[2];
    padded.old_v = pad[3];
    padded.new_v = pad[4];
    padded.adv = pad[5];
    padded.ret = pad[6];
    padded.actor = pad_mask[0];
    padded.critic = pad_mask[1];
    for (int part = 0; part < kSumParts; ++part) {
      const int64_t t = part * kNativeWidth;
      token_terms<kLogprobs, kKl, kValueClip>(at(padded, t), wa, wc, p, part, sums, pad_glp + t,
                                              pad_gval + t);
    }
    for (int64_t k = 0; k < m; ++k) {
      glp[i + k] = pad_glp[k];
      gval[i + k] = pad_gval[k];
    }
  }
  BlockSums b;
  b.policy = sums.policy.total();
  b.clipped = sums.clipped.total();
  b.value = sums.value.total();
  if constexpr (kKl) b.kl = sums.kl.total();
  if constexpr (kValueClip) b.vclipped = sums.vclipped.total();
  return b;
}

using LossBlockFn = BlockSums (*)(const LossArrays&, const LearnerOptions&, int64_t, double, double, double*,
                                  double*);

template <bool kLogprobs>
LossBlockFn pick_block(bool kl, bool vclip) {
  if (kl) return vclip ? &loss_block<kLogprobs, true, true> : &loss_block<kLogprobs, true, false>;
  return vclip ? &loss_block<kLogprobs, false, true> : &loss_block<kLogprobs, false, false>;
}

// The loss block for the options and the batch's optional arrays. Without log-probs the policy has not moved
// (rho = 1) and the KL is 0 (Batch::validate() guarantees that new and reference log-probs come with old
// ones).
LossBlockFn pick_block(const Batch& batch, const LearnerOptions& options) {
  const bool has_lp = !batch.old_logprobs.empty();
  const bool use_vclip = options.value_clip > 0.0;
  return has_lp ? pick_block<true>(options.kl_coef != 0.0, use_vclip) : pick_block<false>(false, use_vclip);
}

// Fetches tokens [t, t + n) of the loss block's arrays one block ahead of it: the block's arithmetic is long
// enough that the hardware prefetchers alone leave it waiting for memory on batches larger than the caches.
// The gradient lines are fetched for writing (a store to a line not in cache first reads it; fetching it
// early hides that read). `after_sweep`: the fused step, where the sweep has just read the critic mask and
// written the advantages, and the returns are written next.
inline void prefetch_block(const LossArrays& in, int64_t t, int64_t n, bool after_sweep) {
  for (int64_t i = 0; i < n; i += 8) {
    __builtin_prefetch(in.old_lp + t + i);
    __builtin_prefetch(in.new_lp + t + i);
    __builtin_prefetch(in.new_v + t + i);
    if (after_sweep) {
      __builtin_prefetch(in.ret + t + i, 1);
    } else {
      __builtin_prefetch(in.adv + t + i);
      __builtin_prefetch(in.ret + t + i);
    }
    if (in.grad_lp) {
      __builtin_prefetch(in.grad_lp + t + i, 1);
      __builtin_prefetch(in.grad_v + t + i, 1);
    }
  }
  for (int64_t i = 0; i < n; i += 64) {
    __builtin_prefetch(in.actor + t + i);
    if (!after_sweep) __builtin_prefetch(in.critic + t + i);
  }
}

// The losses of tokens [begin, end) of one segment, block by block (blocks start at `begin`); tokens up to
// `fetch_end` may be prefetched.
void loss_span(LossBlockFn block, const LossArrays& in, const LearnerOptions& o, int64_t begin, int64_t end,
               int64_t fetch_end, double wa, double wc, LossSums& sums) {
  alignas(64) double scratch_lp[kBlock], scratch_v[kBlock];  // gradients nobody asked for
  for (int64_t b0 = begin; b0 < end; b0 += kBlock) {
    const int64_t n = end - b0 < kBlock ? end - b0 : kBlock;
    const int64_t ahead = fetch_end - b0 - n;
    if (ahead > 0) prefetch_block(in, b0 + n, ahead < kBlock ? ahead : kBlock, false);
    add_block(sums, block(at(in, b0), o, n, wa, wc, in.grad_lp ? in.grad_lp + b0 : scratch_lp,
                          in.grad_v ? in.grad_v + b0 : scratch_v));
  }
}

// The token arrays of a loss call. Without log-probs the log-prob pointers point at the values, never read,
// so that offsetting them stays defined.
LossArrays loss_arrays(const Batch& batch, const Advantages& advantages, Gradients* gradients) {
  LossArrays in{};
  const bool has_lp = !batch.old_logprobs.empty();
  in.old_lp = has_lp ? batch.old_logprobs.data() : batch.values.data();
  in.new_lp = batch.new_logprobs.empty() ? in.old_lp : batch.new_logprobs.data();
  in.ref_lp = batch.ref_logprobs.empty() ? in.old_lp : batch.ref_logprobs.data();
  in.old_v = batch.values.data();
  in.new_v = batch.new_values.empty() ? in.old_v : batch.new_values.data();
  in.adv = advantages.advantages.data();
  in.ret = advantages.returns.data();
  in.actor = batch.actor_mask.data();
  in.critic = batch.critic_mask.data();
  in.grad_lp = gradients ? gradients->logprobs.data() : nullptr;
  in.grad_v = gradients ? gradients->values.data() : nullptr;
  return in;
}

LossResult loss_result(const LossSums& sums, const LearnerOptions& options) {
  LossResult result;
  result.policy_loss = sums.policy;
  result.kl = sums.kl;
  result.actor_loss = sums.policy + options.kl_coef * sums.kl;
  result.value_loss = sums.value;
  result.clip_fraction = sums.clipped;
  result.value_clip_fraction = sums.vclipped;
  return result;
}

// Losses of tokens [range.begin, range.end): walk the segments the range overlaps, each with its weights.
// The range has been checked by the caller.
LossResult loss_kernel(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                       const LearnerOptions& options, TokenRange range, Gradients* gradients) {
  const LossArrays in = loss_arrays(batch, advantages, gradients);
  const LossBlockFn block = pick_block(batch, options);

  // First segment overlapping the range: the last s with segment_offsets[s] <= range.begin.
  const int64_t* offsets = batch.segment_offsets.data();
  int64_t lo = 0, hi = batch.num_segments();
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= range.begin) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  LossSums sums;
  for (int64_t s = lo, begin = range.begin; begin < range.end; ++s) {
    const int64_t end = offsets[s + 1] < range.end ? offsets[s + 1] : range.end;
    const bool masked = options.summary_loss_masked && batch.segment_kind[s] == SegmentKind::kSummary;
    loss_span(block, in, options, begin, end, range.end, masked ? 0.0 : normalizer.actor_scale[s],
              normalizer.critic_scale[s], sums);
    begin = end > begin ? end : begin;
  }
  return loss_result(sums, options);
}

}  // namespace
}  // namespace crl::learners::cpu
