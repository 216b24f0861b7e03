#include "learners/cpu/cpu_learner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/error.h"
#include "learners/cpu/isa_kernels.h"
#include "learners/cpu/sweep_kernel.h"

// The kernels compiled for the baseline instruction set of the build (isa_kernels.h).
CRL_DEFINE_CPU_KERNELS(generic)

namespace crl::learners::cpu {

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas{Isa::kGeneric};
#if defined(__x86_64__) && defined(CRL_LEARNERS_X86_VARIANTS)
  if (__builtin_cpu_supports("avx2")) isas.push_back(Isa::kAvx2);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
    isas.push_back(Isa::kAvx512);
#endif
  return isas;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kGeneric:
      break;
  }
  return "generic";
}

namespace {

Isa best_isa() {
  static const Isa isa = supported_isas().back();
  return isa;
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

// Index of the first critic-mask token in [begin, end), or -1.
int64_t first_sampled(const uint8_t* mask, int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) {
    if (mask[t]) return t;
  }
  return -1;
}

// Per segment: the critic-mask count n_s (the positions GAE runs over) and the effective actor-mask count.
// Masks are 0/1 bytes, so byte sums count them (a loop the compiler vectorizes).
// The number of ones among the 0/1 bytes x[0..n) (validated masks hold only 0 and 1). Eight bytes at a time:
// multiplying a word of 0/1 bytes by 0x0101...01 leaves their sum (at most 8) in the top byte.
int64_t count_ones(const uint8_t* x, int64_t n) {
  int64_t count = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, x + i, sizeof(word));
    count += static_cast<int64_t>((word * 0x0101010101010101ull) >> 56);
  }
  for (; i < n; ++i) count += x[i];
  return count;
}

// Per segment: the critic-mask count n_s (the positions GAE runs over) and the effective actor-mask count.
void count_masks(const Batch& batch, const LearnerOptions& options, std::vector<int64_t>& critic_count,
                 std::vector<int64_t>& actor_count) {
  const int64_t num_segments = batch.num_segments();
  critic_count.resize(num_segments);
  actor_count.resize(num_segments);
  const uint8_t* critic = batch.critic_mask.data();
  const uint8_t* actor = batch.actor_mask.data();
  const int64_t* seg = batch.segment_offsets.data();
  for (int64_t s = 0; s < num_segments; ++s) {
    const int64_t n = seg[s + 1] - seg[s];
    const bool masked = options.summary_loss_masked && batch.segment_kind[s] == SegmentKind::kSummary;
    critic_count[s] = count_ones(critic + seg[s], n);
    actor_count[s] = masked ? 0 : count_ones(actor + seg[s], n);
  }
}

// Steps 1, 2 and 4 at segment level from the counts n_s: lambda_s, N_after(s), the correction factor, and
// what each segment's token sweep needs (`zero_nonpositive`: the sweep applies the positive-only ablation).
// Walks every rollout's segments backwards, carrying
//   later_tokens = N_after(s) = sum of n_j for j > s,
//   later_log    = sum_{j>s} n_j log(gamma lambda_j)   (the tokenwise-lambda correction, in log space),
//   the first sampled value of the next non-empty segment (the stitched target's bootstrap).
void plan_segments(const Batch& batch, const LearnerOptions& options, bool zero_nonpositive, Advantages& out,
                   std::vector<SegmentSweep>& plan) {
  const int64_t num_segments = batch.num_segments();
  out.n_after.resize(num_segments);
  out.lambda.resize(num_segments);
  out.factor.resize(num_segments);
  plan.resize(num_segments);
  const double* values = batch.values.data();
  const uint8_t* critic = batch.critic_mask.data();
  const int64_t* seg = batch.segment_offsets.data();
  const double gamma = options.gamma;
  for (int64_t s = 0; s < num_segments; ++s) out.lambda[s] = segment_lambda(options, out.n_sampled[s]);
  for (int64_t r = 0; r < batch.num_rollouts(); ++r) {
    const int64_t s_begin = batch.rollout_offsets[r], s_end = batch.rollout_offsets[r + 1];
    const double reward = batch.rewards[r];
    int64_t later_tokens = 0;
    double later_log = 0.0;
    bool has_next = false;
    double next_first_value = 0.0;
    for (int64_t s = s_end - 1; s >= s_begin; --s) {
      const int64_t n = out.n_sampled[s];
      const double lambda = out.lambda[s];
      const double log_gl = log_discount(gamma, lambda);
      out.n_after[s] = later_tokens;
      double factor = 1.0;
      if (options.correction &&
          correction_applies(options.correction_segments, batch.segment_kind[s] == SegmentKind::kSummary)) {
        factor = options.lambda_mode == LambdaMode::kTokenwise
                     ? (later_tokens == 0 ? 1.0 : std::exp(later_log))
                     : power_from_log(later_tokens, log_gl);
      }
      out.factor[s] = factor;
      SegmentSweep& p = plan[s];
      p.gamma = gamma;
      p.gl = gamma * lambda;
      p.reward = reward;
      p.factor = factor;
      p.zero_advantage = zero_nonpositive && reward <= 0.0;
      p.ret_scale = options.critic_target == CriticTarget::kCorrected ? factor : 1.0;
      // The stitched target bootstraps a non-final segment from V(first sampled token of the next one): its
      // last sampled token's return gains gamma V_boot - R, discounted back by the sweep.
      p.corr0 = options.critic_target == CriticTarget::kStitched && has_next
                    ? gamma * next_first_value - reward
                    : 0.0;
      if (n > 0) {
        has_next = true;
        next_first_value = values[first_sampled(critic, seg[s], seg[s + 1])];
        later_log += static_cast<double>(n) * log_gl;
      }
      later_tokens += n;
    }
  }
}

// The loss weights from the per-segment counts (see LossNormalizer).
LossNormalizer normalizer_from_counts(const std::vector<int64_t>& critic_count,
                                      const std::vector<int64_t>& actor_count,
                                      const LearnerOptions& options) {
  const size_t num_segments = critic_count.size();
  int64_t actor_total = 0, critic_total = 0, actor_segments = 0, critic_segments = 0;
  for (size_t s = 0; s < num_segments; ++s) {
    actor_total += actor_count[s];
    critic_total += critic_count[s];
    actor_segments += actor_count[s] > 0;
    critic_segments += critic_count[s] > 0;
  }
  LossNormalizer norm;
  norm.actor_scale.assign(num_segments, 0.0);
  norm.critic_scale.assign(num_segments, 0.0);
  for (size_t s = 0; s < num_segments; ++s) {
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

}  // namespace

namespace {

// The per-instruction-set sweep.
LossResult sweep(const detail::SweepInputs& in, Advantages& out, Gradients* gradients, Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return detail::sweep_avx512(in, out, gradients);
    case Isa::kAvx2:
      return detail::sweep_avx2(in, out, gradients);
    case Isa::kGeneric:
      break;
  }
  return detail::sweep_generic(in, out, gradients);
}

// Whitening over the effective actor tokens, then positive-only (zero rollouts whose reward is <= 0): the
// optional post-processing of the actor advantages (returns are never touched). Only with whitening does
// positive-only wait until here; otherwise the sweep applies it.
void whiten_advantages(const Batch& batch, const LearnerOptions& options, Advantages& out) {
  const int64_t num_tokens = batch.num_tokens();
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
  if (options.positive_only) {
    const int64_t* seg = batch.segment_offsets.data();
    for (int64_t r = 0; r < batch.num_rollouts(); ++r) {
      if (batch.rewards[r] > 0.0) continue;
      const int64_t begin = seg[batch.rollout_offsets[r]], end = seg[batch.rollout_offsets[r + 1]];
      std::fill(out.advantages.begin() + begin, out.advantages.begin() + end, 0.0);
    }
  }
}

// Steps 1-5 and, with `normalizer`, the fused losses (whitening excluded: it needs every advantage first).
LossResult sweep_batch(const Batch& batch, const LearnerOptions& options, Advantages& out,
                       LossNormalizer* normalizer, Gradients* gradients, Isa isa) {
  const int64_t num_tokens = batch.num_tokens();
  out.advantages.resize(num_tokens);
  out.returns.resize(num_tokens);
  std::vector<int64_t> actor_count;
  count_masks(batch, options, out.n_sampled, actor_count);
  std::vector<SegmentSweep> plan;
  plan_segments(batch, options, options.positive_only && !options.whiten_advantages, out, plan);
  detail::SweepInputs in;
  in.batch = &batch;
  in.options = &options;
  in.plan = plan.data();
  if (normalizer) {
    *normalizer = normalizer_from_counts(out.n_sampled, actor_count, options);
    in.normalizer = normalizer;
  }
  return sweep(in, out, gradients, isa);
}

}  // namespace

void compute_advantages(const Batch& batch, const LearnerOptions& options, Advantages& out) {
  compute_advantages(batch, options, out, best_isa());
}

void compute_advantages(const Batch& batch, const LearnerOptions& options, Advantages& out, Isa isa) {
  sweep_batch(batch, options, out, nullptr, nullptr, isa);
  if (options.whiten_advantages) whiten_advantages(batch, options, out);
}

LossResult compute_step(const Batch& batch, const LearnerOptions& options, Advantages& out,
                        LossNormalizer& normalizer, Gradients* gradients) {
  return compute_step(batch, options, out, normalizer, gradients, best_isa());
}

LossResult compute_step(const Batch& batch, const LearnerOptions& options, Advantages& out,
                        LossNormalizer& normalizer, Gradients* gradients, Isa isa) {
  if (gradients && static_cast<int64_t>(gradients->logprobs.size()) != batch.num_tokens()) {
    gradients->resize(batch.num_tokens());
  }
  if (options.whiten_advantages) {
    compute_advantages(batch, options, out, isa);
    normalizer = make_normalizer(batch, options);
    return compute_losses(batch, out, normalizer, options, TokenRange{0, batch.num_tokens()}, gradients, isa);
  }
  return sweep_batch(batch, options, out, &normalizer, gradients, isa);
}

LossNormalizer make_normalizer(const Batch& batch, const LearnerOptions& options) {
  std::vector<int64_t> critic_count, actor_count;
  count_masks(batch, options, critic_count, actor_count);
  return normalizer_from_counts(critic_count, actor_count, options);
}

LossResult compute_losses(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                          const LearnerOptions& options, TokenRange range, Gradients* gradients) {
  return compute_losses(batch, advantages, normalizer, options, range, gradients, best_isa());
}

LossResult compute_losses(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                          const LearnerOptions& options, TokenRange range, Gradients* gradients, Isa isa) {
  CRL_CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= batch.num_tokens(),
            "token range [" << range.begin << ", " << range.end << ") outside the batch");
  CRL_CHECK(!gradients || static_cast<int64_t>(gradients->logprobs.size()) == batch.num_tokens(),
            "gradients not sized to the batch");
  // The same kernel compiled for the widest vectors the CPU has: bit-identical results (the kernel uses no
  // library math, no FMA contraction and no reassociation).
  switch (isa) {
    case Isa::kAvx512:
      return detail::losses_avx512(batch, advantages, normalizer, options, range, gradients);
    case Isa::kAvx2:
      return detail::losses_avx2(batch, advantages, normalizer, options, range, gradients);
    case Isa::kGeneric:
      break;
  }
  return detail::losses_generic(batch, advantages, normalizer, options, range, gradients);
}

}  // namespace crl::learners::cpu
