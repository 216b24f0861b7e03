#include "learners/cpu/cpu_learner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/error.h"
#include "learners/cpu/loss_kernel.h"

namespace crl::learners::cpu {

namespace detail {
LossResult losses_generic(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                          const LearnerOptions& options, TokenRange range, Gradients* gradients) {
  return loss_kernel(batch, advantages, normalizer, options, range, gradients);
}
}  // namespace detail

namespace {
bool has_avx2() {
#if defined(__x86_64__) && defined(CRL_LEARNERS_AVX2)
  static const bool supported = __builtin_cpu_supports("avx2");
  return supported;
#else
  return false;
#endif
}
}  // namespace

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

LossResult compute_losses(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                          const LearnerOptions& options, TokenRange range, Gradients* gradients) {
  CRL_CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= batch.num_tokens(),
            "token range [" << range.begin << ", " << range.end << ") outside the batch");
  CRL_CHECK(!gradients || static_cast<int64_t>(gradients->logprobs.size()) == batch.num_tokens(),
            "gradients not sized to the batch");
  // The same kernel compiled for AVX2 when the CPU has it: wider vectors, bit-identical results (the kernel
  // uses no library math and no FMA contraction).
  if (has_avx2()) return detail::losses_avx2(batch, advantages, normalizer, options, range, gradients);
  return detail::losses_generic(batch, advantages, normalizer, options, range, gradients);
}

}  // namespace crl::learners::cpu
