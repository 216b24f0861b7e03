#include "learners/reference.h"

#include "learners/cpu/cpu_learner.h"

namespace crl::learners {

std::vector<double> zero_critic_reference(const Batch& batch, const LearnerOptions& options) {
  std::vector<double> out(batch.num_tokens(), 0.0);
  const auto& seg = batch.segment_offsets;
  for (int64_t r = 0; r < batch.num_rollouts(); ++r) {
    const int64_t s_begin = batch.rollout_offsets[r], s_end = batch.rollout_offsets[r + 1];
    // The stitched sequence: every sampled position of the rollout in order, with its segment.
    std::vector<int64_t> position, segment;
    for (int64_t s = s_begin; s < s_end; ++s) {
      for (int64_t t = seg[s]; t < seg[s + 1]; ++t) {
        if (batch.critic_mask[t]) {
          position.push_back(t);
          segment.push_back(s);
        }
      }
    }
    const int64_t total = static_cast<int64_t>(position.size());
    std::vector<double> lambda_of(s_end - s_begin);
    for (int64_t s = s_begin; s < s_end; ++s) {
      int64_t n = 0;
      for (int64_t t = seg[s]; t < seg[s + 1]; ++t) n += batch.critic_mask[t];
      lambda_of[s - s_begin] = cpu::segment_lambda(options, n);
    }
    // One full-sequence GAE per segment s (uniform lambda_s), or one with per-token lambdas (tokenwise):
    // delta_t = r_t + gamma * 0 - 0, r = R only at the very last token; A_t = delta_t + gamma lambda A_{t+1}.
    for (int64_t s = s_begin; s < s_end; ++s) {
      double a = 0.0;
      for (int64_t k = total - 1; k >= 0; --k) {
        const double delta = k == total - 1 ? batch.rewards[r] : 0.0;
        double lambda = lambda_of[s - s_begin];
        if (options.lambda_mode == LambdaMode::kTokenwise && k + 1 < total) {
          lambda = lambda_of[segment[k + 1] - s_begin];  // the step into token k+1 uses its segment's lambda
        }
        a = delta + options.gamma * lambda * a;
        if (segment[k] == s) out[position[k]] = a;
      }
    }
  }
  return out;
}

}  // namespace crl::learners
