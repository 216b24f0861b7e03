#pragma once
// Random batches for property tests, drawn from a fixed crl::Rng stream so that every failure reproduces.
#include <cmath>

#include "engine/rng.h"
#include "learners/batch.h"

namespace crl::learners::testing {

struct RandomBatchShape {
  int rollouts = 8;
  int max_segments = 5;         // segments per rollout in [1, max_segments], alternating exec / summary
  int max_segment_tokens = 40;  // tokens per segment in [0, max]
  double sampled_share = 0.7;   // share of execution tokens that are sampled (summary tokens all are)
  bool binary_rewards = false;
  bool with_logprobs = true;
};

inline Batch random_batch(uint64_t seed, const RandomBatchShape& shape = {}) {
  Rng rng(StreamKey{seed, 0, 0, StreamRole::kLearner, 0});
  Batch b;
  for (int r = 0; r < shape.rollouts; ++r) {
    const double reward = shape.binary_rewards ? (rng.bernoulli(0.5) ? 1.0 : 0.0) : 2.0 * rng.uniform() - 0.5;
    b.begin_rollout(reward, "r" + std::to_string(r));
    const int segments = 1 + static_cast<int>(rng.uniform_int(shape.max_segments));
    for (int s = 0; s < segments; ++s) {
      const SegmentKind kind = s % 2 == 0 ? SegmentKind::kExecution : SegmentKind::kSummary;
      const int n = static_cast<int>(rng.uniform_int(shape.max_segment_tokens + 1));
      std::vector<double> values(n);
      std::vector<uint8_t> mask(n);
      for (int t = 0; t < n; ++t) {
        values[t] = 2.0 * rng.uniform() - 1.0;
        mask[t] = kind == SegmentKind::kSummary || rng.bernoulli(shape.sampled_share) ? 1 : 0;
      }
      b.add_segment(kind, values, mask, mask);
    }
  }
  if (shape.with_logprobs) {
    const int64_t n = b.num_tokens();
    b.old_logprobs.resize(n);
    b.new_logprobs.resize(n);
    b.ref_logprobs.resize(n);
    b.new_values.resize(n);
    for (int64_t t = 0; t < n; ++t) {
      b.old_logprobs[t] = -3.0 * rng.uniform();
      b.new_logprobs[t] = b.old_logprobs[t] + 0.6 * (rng.uniform() - 0.5);
      b.ref_logprobs[t] = b.old_logprobs[t] + 0.2 * (rng.uniform() - 0.5);
      b.new_values[t] = b.values[t] + 0.5 * (rng.uniform() - 0.5);
    }
  }
  b.validate();
  return b;
}

}  // namespace crl::learners::testing
