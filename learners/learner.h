#pragma once
// The CompactionRL learner facade: advantages, returns, losses and gradients of a flat Batch, computed by
// the CPU reference (plain C++/Eigen, double) or the CUDA back-end (same numbers to rounding), chosen
// explicitly (DESIGN.md style 8).
//
// The algorithm (spec 1.4, 1.5), per logical rollout with segments s = 0..K-1:
//  1. n_s = number of critic-mask tokens of s (the "sampled" positions GAE runs over; by default the critic
//     mask is the actor mask); N_after(s) = sum of n_j over later segments of the same rollout.
//  2. lambda_s = 1 - 1/(1.5 max(n_s, 1)) (or a fixed lambda).
//  3. Local GAE over the sampled positions of s only (other positions are skipped, not zero-filled):
//     r = 0 except r = R at the last sampled token, V = 0 after it,
//     delta_i = r_i + gamma V_{i+1} - V_i, A_i = delta_i + gamma lambda_s A_{i+1}.
//  4. Correction: A_hat = (gamma lambda_s)^{N_after(s)} A_loc, evaluated as exp(N log(gamma lambda_s)).
//  5. Returns G = A_loc + V (default), A_hat + V, or a stitched-bootstrap target; unsampled tokens get
//     advantage 0 and return V.
//  6. PPO: l = -min(rho A, clip(rho, 1-eps, 1+eps) A), rho = exp(logp - logp_old), summed over actor tokens
//     and divided once by the global number of actor tokens; value loss (V - G)^2 the same way over critic
//     tokens. Micro-batches add raw weighted sums, so any split gives the same totals (LossNormalizer).
#include <cstdint>
#include <vector>

#include "learners/batch.h"
#include "learners/options.h"

namespace crl::learners {

struct Advantages {
  // token level
  std::vector<double> advantages;  // actor advantages (corrected, then optionally whitened / positive-only)
  std::vector<double> returns;     // critic targets
  // segment level
  std::vector<int64_t> n_sampled;  // n_s
  std::vector<int64_t> n_after;    // N_after(s)
  std::vector<double> lambda;      // lambda_s
  std::vector<double> factor;      // the correction factor applied to the whole local advantage of s
};

// The global denominators, fixed once for the whole global batch and shared by all its micro-batches.
// A token t of segment s with (effective) actor mask 1 weighs actor_scale[s]; with critic mask 1 it weighs
// critic_scale[s]. Token-level: 1 / (actor tokens of the batch). Without token-level normalization:
// 1 / (n_actor(s) * segments that have actor tokens), i.e. a mean per segment, then over segments.
struct LossNormalizer {
  std::vector<double> actor_scale;
  std::vector<double> critic_scale;
};

// Tokens [begin, end) of the batch: one micro-batch. Any split of [0, num_tokens) is allowed, even inside
// a segment, because every weight comes from the LossNormalizer.
struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// The tokens of each rollout of `b`, one range per rollout in batch order (the policies' minibatches take
// whole rollouts).
std::vector<TokenRange> rollout_token_ranges(const Batch& b);

// Raw weighted sums; the sums over the micro-batches of a batch are the losses of the batch.
struct LossResult {
  double policy_loss = 0.0;    // token-normalized clipped PPO surrogate
  double kl = 0.0;             // token-normalized k3 KL to the reference (0 when kl_coef = 0)
  double actor_loss = 0.0;     // policy_loss + kl_coef * kl
  double value_loss = 0.0;     // token-normalized (V - G)^2, clipped when value_clip > 0
  double clip_fraction = 0.0;  // weighted share of actor tokens whose ratio was clipped
  double value_clip_fraction = 0.0;
  LossResult& operator+=(const LossResult& other);
};

// Gradients of actor_loss with respect to the new log-probs and of value_loss with respect to the new
// values, one per token of the batch (zero outside the masks). A loss call writes only its range.
struct Gradients {
  std::vector<double> logprobs;
  std::vector<double> values;
  void resize(int64_t num_tokens) {
    logprobs.assign(num_tokens, 0.0);
    values.assign(num_tokens, 0.0);
  }
};

// True when a CUDA device is usable (built with CUDA, and cudaGetDeviceCount() > 0). `why` says why not.
bool cuda_device_available(std::string* why = nullptr);

class Learner {
 public:
  // Throws crl::Error when the options are out of range, or when kCuda is asked for and there is no build
  // with CUDA or no device (the message says which).
  explicit Learner(LearnerOptions options, Backend backend = Backend::kCpu);

  const LearnerOptions& options() const { return options_; }
  Backend backend() const { return backend_; }

  // Steps 1-5 for the whole batch (a rollout's segments must all be in the batch: advantages need them).
  Advantages advantages(const Batch& batch) const;
  LossNormalizer normalizer(const Batch& batch) const;
  // Losses and gradients of one micro-batch; `gradients` (sized to the batch) may be null.
  LossResult losses(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                    TokenRange range, Gradients* gradients) const;
  // The whole batch as one micro-batch.
  LossResult losses(const Batch& batch, const Advantages& advantages, Gradients* gradients) const;
  // advantages(), normalizer() and the losses of the whole batch as one micro-batch, in one call: the same
  // numbers as the three calls (on the CPU the same bits, from one pass over the tokens instead of two).
  // `advantages` and `gradients` (may be null) are resized to the batch; reusing them avoids allocation.
  LossResult step(const Batch& batch, Advantages& advantages, Gradients* gradients) const;

 private:
  LearnerOptions options_;
  Backend backend_;
};

// 1 when the token's actor loss is enabled under the options (the summary-loss-masked ablation removes
// summary tokens from the actor only).
inline bool effective_actor(const Batch& batch, int64_t t, const LearnerOptions& options) {
  return batch.actor_mask[t] != 0 && !(options.summary_loss_masked && batch.kind[t] == SegmentKind::kSummary);
}

}  // namespace crl::learners
