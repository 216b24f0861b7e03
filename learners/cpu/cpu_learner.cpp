#include "learners/cpu/cpu_learner.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/error.h"

namespace crl::learners::cpu {

double segment_lambda(const LearnerOptions& options, int64_t n_sampled) {
  if (options.lambda_mode == LambdaMode::kFixed) return options.lambda;
  // L_s is clamped to >= 1 so that an empty segment still has a finite lambda.
  const double length = static_cast<double>(std::max<int64_t>(n_sampled, 1));
  return 1.0 - 1.0 / (options.lambda_alpha * length);
}

double log_discount(double gamma, double lambda) {
  if (gamma <= 0.0 || lambda <= 0.0) return -std::numeric_limits<double>::infinity();
  return std::log(gamma) + std::log(lambda);
}

namespace {

// exp(n * log_gl) without 0 * inf: N = 0 means "no later token", so the factor is exactly 1.
double power_from_log(int64_t n, double log_gl) {
  if (n == 0) return 1.0;
  return std::exp(static_cast<double>(n) * log_gl);
}

// Index of the first / last critic-mask token in [begin, end), or -1.
int64_t first_sampled(const uint8_t* mask, int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) {
    if (mask[t]) return t;
  }
  return -1;
}
int64_t last_sampled(const uint8_t* mask, int64_t begin, int64_t end) {
  for (int64_t t = end - 1; t >= begin; --t) {
    if (mask[t]) return t;
  }
  return -1;
}

}  // namespace

void compute_advantages(const Batch& batch, const LearnerOptions& options, Advantages& out) {
  const int64_t num_tokens = batch.num_tokens();
  const int64_t num_segments = batch.num_segments();
  out.advantages.resize(num_tokens);
  out.returns.resize(num_tokens);
  out.n_sampled.resize(num_segments);
  out.n_after.resize(num_segments);
  out.lambda.resize(num_segments);
  out.factor.resize(num_segments);
  const double* values = batch.values.data();
  const uint8_t* critic = batch.critic_mask.data();
  const int64_t* seg = batch.segment_offsets.data();
  const double gamma = options.gamma;

  // Pass 1: n_s, the sampled positions of each segment (masks are 0/1, so a byte sum counts them).
  for (int64_t s = 0; s < num_segments; ++s) {
    int64_t n = 0;
    for (int64_t t = seg[s]; t < seg[s + 1]; ++t) n += critic[t];
    out.n_sampled[s] = n;
    out.lambda[s] = segment_lambda(options, n);
  }

  for (int64_t r = 0; r < batch.num_rollouts(); ++r) {
    const int64_t s_begin = batch.rollout_offsets[r], s_end = batch.rollout_offsets[r + 1];
    const double reward = batch.rewards[r];
    // Walk the rollout's segments backwards, carrying
    //   later_tokens = N_after(s) = sum of n_j for j > s,
    //   later_log    = sum_{j>s} n_j log(gamma lambda_j)   (the tokenwise-lambda correction, in log space),
    //   the first sampled value of the next non-empty segment (the stitched target's bootstrap).
    int64_t later_tokens = 0;
    double later_log = 0.0;
    bool has_next = false;
    double next_first_value = 0.0;
    for (int64_t s = s_end - 1; s >= s_begin; --s) {
      const int64_t n = out.n_sampled[s];
      const double lambda = out.lambda[s];
      const double gl = gamma * lambda;
      const double log_gl = log_discount(gamma, lambda);
      out.n_after[s] = later_tokens;
      double factor = 1.0;
      if (options.correction) {
        factor = options.lambda_mode == LambdaMode::kTokenwise
                     ? (later_tokens == 0 ? 1.0 : std::exp(later_log))
                     : power_from_log(later_tokens, log_gl);
      }
      out.factor[s] = factor;

      // Pass 2, one reverse sweep over the segment: local GAE over sampled positions only. Unsampled
      // positions are skipped (advantage 0, return V) and do not break the recurrence.
      //   a    = A_loc at the current position, built from the end: a = delta + gamma lambda a_next,
      //   corr = the stitched target's change of the terminal delta (gamma V_boot - R instead of R - 0)
      //          discounted back to the current position: A_stitch = A_loc + corr.
      // The return is ret_scale * a + corr + V, which covers all three critic targets without a branch.
      const int64_t begin = seg[s], end = seg[s + 1];
      const double ret_scale = options.critic_target == CriticTarget::kCorrected ? factor : 1.0;
      double corr = 0.0;
      if (options.critic_target == CriticTarget::kStitched && has_next)
        corr = gamma * next_first_value - reward;
      double* adv = out.advantages.data();
      double* ret = out.returns.data();
      const int64_t last = n > 0 ? last_sampled(critic, begin, end) : -1;
      // Unsampled tail of the segment (the whole segment when it has no sampled token).
      for (int64_t t = end - 1; t > std::max(last, begin - 1); --t) {
        adv[t] = 0.0;
        ret[t] = values[t];
      }
      if (last >= 0) {
        // The last sampled token: reward R, bootstrap 0.
        double a = reward - values[last];
        double next_v = values[last];
        adv[last] = factor * a;
        ret[last] = ret_scale * a + corr + values[last];
        for (int64_t t = last - 1; t >= begin; --t) {
          const double v = values[t];
          if (!critic[t]) {
            adv[t] = 0.0;
            ret[t] = v;
            continue;
          }
          a = (gamma * next_v - v) + gl * a;
          corr *= gl;
          next_v = v;
          adv[t] = factor * a;
          ret[t] = ret_scale * a + corr + v;
        }
        has_next = true;
        next_first_value = values[first_sampled(critic, begin, end)];
      }
      later_tokens += n;
      if (n > 0) later_log += static_cast<double>(n) * log_gl;
    }
  }

  // Optional post-processing of the actor advantages only (returns are never touched):
  // whitening over effective actor tokens, then positive-only (zero rollouts whose reward is <= 0).
  if (options.whiten_advantages) {
    double sum = 0.0;
    int64_t count = 0;
    for (int64_t t = 0; t < num_tokens; ++t) {
      if (effective_actor(batch, t, options)) {
        sum += out.advantages[t];
        ++count;
      }
    }
    if (count > 0) {
      const double mean = sum / static_cast<double>(count);
      double squares = 0.0;
      for (int64_t t = 0; t < num_tokens; ++t) {
        if (effective_actor(batch, t, options))
          squares += (out.advantages[t] - mean) * (out.advantages[t] - mean);
      }
      const double inv_std = 1.0 / (std::sqrt(squares / static_cast<double>(count)) + options.whiten_epsilon);
      for (int64_t t = 0; t < num_tokens; ++t) {
        if (effective_actor(batch, t, options)) out.advantages[t] = (out.advantages[t] - mean) * inv_std;
      }
    }
  }
  if (options.positive_only) {
    for (int64_t r = 0; r < batch.num_rollouts(); ++r) {
      if (batch.rewards[r] > 0.0) continue;
      const int64_t begin = seg[batch.rollout_offsets[r]], end = seg[batch.rollout_offsets[r + 1]];
      std::fill(out.advantages.begin() + begin, out.advantages.begin() + end, 0.0);
    }
  }
}

LossNormalizer make_normalizer(const Batch& batch, const LearnerOptions& options) {
  const int64_t num_segments = batch.num_segments();
  std::vector<int64_t> actor_count(num_segments, 0), critic_count(num_segments, 0);
  int64_t actor_total = 0, critic_total = 0, actor_segments = 0, critic_segments = 0;
  for (int64_t s = 0; s < num_segments; ++s) {
    const bool masked = options.summary_loss_masked && batch.segment_kind[s] == SegmentKind::kSummary;
    for (int64_t t = batch.segment_offsets[s]; t < batch.segment_offsets[s + 1]; ++t) {
      actor_count[s] += masked ? 0 : batch.actor_mask[t];
      critic_count[s] += batch.critic_mask[t];
    }
    actor_total += actor_count[s];
    critic_total += critic_count[s];
    actor_segments += actor_count[s] > 0;
    critic_segments += critic_count[s] > 0;
  }
  LossNormalizer norm;
  norm.actor_scale.assign(num_segments, 0.0);
  norm.critic_scale.assign(num_segments, 0.0);
  for (int64_t s = 0; s < num_segments; ++s) {
    if (options.token_level_normalization) {
      // One global denominator: every enabled token of the global batch weighs the same.
      if (actor_count[s] > 0) norm.actor_scale[s] = 1.0 / static_cast<double>(actor_total);
      if (critic_count[s] > 0) norm.critic_scale[s] = 1.0 / static_cast<double>(critic_total);
    } else {
      // Mean per segment, then mean over the segments that have tokens.
      if (actor_count[s] > 0)
        norm.actor_scale[s] =
            1.0 / (static_cast<double>(actor_count[s]) * static_cast<double>(actor_segments));
      if (critic_count[s] > 0)
        norm.critic_scale[s] =
            1.0 / (static_cast<double>(critic_count[s]) * static_cast<double>(critic_segments));
    }
  }
  return norm;
}

namespace {

// Tokens per inner chunk: the ratios of one chunk are computed by Eigen's vectorized exp into a stack
// buffer, so the hot loop never allocates.
constexpr int64_t kChunk = 1024;
// Window alignment of the vectorized exp (a multiple of every SIMD width Eigen may use for double).
constexpr int64_t kAlign = 16;

struct LossSums {
  double policy = 0.0, kl = 0.0, value = 0.0, clipped = 0.0, vclipped = 0.0;
};

// Token arrays of one loss call (optional arrays already replaced by their defaults).
struct LossArrays {
  const double *old_lp, *new_lp, *ref_lp, *old_v, *new_v, *adv, *ret;
  const uint8_t *actor, *critic;
  double *grad_lp, *grad_v;
};

// The per-token losses of tokens [w0 + off, w0 + off + len), all in one segment (weights wa, wc). The loop
// is branch-free and its sums are declared as SIMD reductions, so the compiler vectorizes it; every
// per-token value (hence every gradient) is computed the same way whatever the split.
template <bool kKl, bool kValueClip, bool kGrad>
void loss_span(const LossArrays& in, const LearnerOptions& o, int64_t w0, int64_t off, int64_t len, double wa,
               double wc, const double* ratio, const double* ref_ratio, LossSums& sums) {
  const double lo = 1.0 - o.clip_epsilon, hi = 1.0 + o.clip_epsilon;
  const double vclip = o.value_clip, kl_coef = o.kl_coef;
  double policy = 0.0, kl = 0.0, value = 0.0, clipped = 0.0, vclipped = 0.0;
#pragma omp simd reduction(+ : policy, kl, value, clipped, vclipped)
  for (int64_t i = off; i < off + len; ++i) {
    const int64_t t = w0 + i;
    // Actor: l = -min(rho A, clip(rho) A). Its derivative in log pi is -rho A on the unclipped branch and 0
    // on the clipped one (ties take the unclipped branch, where both agree).
    const double w = wa * static_cast<double>(in.actor[t]);
    const double a = in.adv[t];
    const double r = ratio[i];
    const double unclipped = r * a;
    const double r_clip = r < lo ? lo : (r > hi ? hi : r);
    const double clipped_obj = r_clip * a;
    const bool take_unclipped = unclipped <= clipped_obj;
    policy += w * -(take_unclipped ? unclipped : clipped_obj);
    clipped += take_unclipped ? 0.0 : w;
    double g = take_unclipped ? -unclipped : 0.0;
    if constexpr (kKl) {
      // k3 = exp(d) - d - 1 with d = log pi_ref - log pi; d k3 / d log pi = 1 - exp(d).
      const double d = in.ref_lp[t] - in.new_lp[t];
      kl += w * (ref_ratio[i] - d - 1.0);
      g += kl_coef * (1.0 - ref_ratio[i]);
    }
    // Critic: (V - G)^2, or with clipping max((V - G)^2, (V_clip - G)^2), V_clip = V_old + clip(V - V_old).
    const double wv = wc * static_cast<double>(in.critic[t]);
    const double diff = in.new_v[t] - in.ret[t];
    double loss_v = diff * diff;
    double gv = 2.0 * diff;
    if constexpr (kValueClip) {
      const double delta = in.new_v[t] - in.old_v[t];
      const double delta_c = delta < -vclip ? -vclip : (delta > vclip ? vclip : delta);
      const double diff_c = in.old_v[t] + delta_c - in.ret[t];
      const bool take_clipped = diff_c * diff_c > loss_v;
      const bool inside = (delta < 0.0 ? -delta : delta) < vclip;
      gv = take_clipped ? (inside ? 2.0 * diff_c : 0.0) : gv;
      loss_v = take_clipped ? diff_c * diff_c : loss_v;
      vclipped += take_clipped ? wv : 0.0;
    }
    value += wv * loss_v;
    if constexpr (kGrad) {
      in.grad_lp[t] = w * g;
      in.grad_v[t] = wv * gv;
    }
  }
  sums.policy += policy;
  sums.kl += kl;
  sums.value += value;
  sums.clipped += clipped;
  sums.vclipped += vclipped;
}

using LossSpanFn = void (*)(const LossArrays&, const LearnerOptions&, int64_t, int64_t, int64_t, double,
                            double, const double*, const double*, LossSums&);

template <bool kKl, bool kValueClip>
LossSpanFn pick_span(bool grad) {
  return grad ? &loss_span<kKl, kValueClip, true> : &loss_span<kKl, kValueClip, false>;
}

}  // namespace

LossResult compute_losses(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                          const LearnerOptions& options, TokenRange range, Gradients* gradients) {
  CRL_CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= batch.num_tokens(),
            "token range [" << range.begin << ", " << range.end << ") outside the batch");
  LossArrays in{};
  in.old_lp = batch.old_logprobs.empty() ? nullptr : batch.old_logprobs.data();
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
  // Without log-probs the policy has not moved (rho = 1) and the KL is 0 (Batch::validate() guarantees that
  // new / reference log-probs come with old ones).
  const bool use_kl = options.kl_coef != 0.0 && in.old_lp != nullptr;
  const bool use_vclip = options.value_clip > 0.0;
  const LossSpanFn span =
      use_kl ? (use_vclip ? pick_span<true, true>(gradients) : pick_span<true, false>(gradients))
             : (use_vclip ? pick_span<false, true>(gradients) : pick_span<false, false>(gradients));

  LossSums sums;
  alignas(64) double ratio[kChunk + 2 * kAlign];
  alignas(64) double ref_ratio[kChunk + 2 * kAlign];
  // First segment overlapping the range (segment offsets are sorted).
  int64_t s = std::upper_bound(batch.segment_offsets.begin(), batch.segment_offsets.end(), range.begin) -
              batch.segment_offsets.begin() - 1;
  for (int64_t begin = range.begin; begin < range.end; ++s) {
    const int64_t seg_end = std::min(batch.segment_offsets[s + 1], range.end);
    const bool masked = options.summary_loss_masked && batch.segment_kind[s] == SegmentKind::kSummary;
    const double wa = masked ? 0.0 : normalizer.actor_scale[s];
    const double wc = normalizer.critic_scale[s];
    for (int64_t c0 = begin; c0 < seg_end; c0 += kChunk) {
      const int64_t c1 = std::min(c0 + kChunk, seg_end);
      // The ratios are computed over a window whose ends are fixed by absolute token index (multiples of
      // kAlign, or the batch end), so each token takes the same path (vector or scalar exp) and gets
      // bit-for-bit the same ratio whatever micro-batch split it is in: gradients are then identical.
      const int64_t w0 = c0 - c0 % kAlign;
      const int64_t w1 = std::min((c1 + kAlign - 1) / kAlign * kAlign, batch.num_tokens());
      const int64_t wlen = w1 - w0;
      Eigen::Map<Eigen::ArrayXd> rho(ratio, wlen);
      if (in.old_lp) {
        // rho = exp(log pi - log pi_old); the k3 KL needs exp(log pi_ref - log pi).
        rho = (Eigen::Map<const Eigen::ArrayXd>(in.new_lp + w0, wlen) -
               Eigen::Map<const Eigen::ArrayXd>(in.old_lp + w0, wlen))
                  .exp();
        if (use_kl) {
          Eigen::Map<Eigen::ArrayXd>(ref_ratio, wlen) =
              (Eigen::Map<const Eigen::ArrayXd>(in.ref_lp + w0, wlen) -
               Eigen::Map<const Eigen::ArrayXd>(in.new_lp + w0, wlen))
                  .exp();
        }
      } else {
        rho.setOnes();
      }
      span(in, options, w0, c0 - w0, c1 - c0, wa, wc, ratio, ref_ratio, sums);
    }
    begin = seg_end;
  }
  LossResult result;
  result.policy_loss = sums.policy;
  result.kl = sums.kl;
  result.actor_loss = sums.policy + options.kl_coef * sums.kl;
  result.value_loss = sums.value;
  result.clip_fraction = sums.clipped;
  result.value_clip_fraction = sums.vclipped;
  return result;
}

}  // namespace crl::learners::cpu
