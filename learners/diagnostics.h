#pragma once
// Critic diagnostics (spec 1.7): how the value function behaves across compaction boundaries and how much
// of the return it explains, split by segment kind.
#include <cstdint>

#include "learners/batch.h"
#include "learners/learner.h"

namespace crl::learners {

struct BoundaryGap {
  int64_t count = 0;
  double mean = 0.0;      // mean of V(last sampled token of s) - V(first sampled token of s+1)
  double mean_abs = 0.0;  // mean of its absolute value
};

struct Diagnostics {
  // gap[from kind][to kind], indexed by SegmentKind (execution = 0, summary = 1): exec->sum is gap[0][1],
  // sum->exec is gap[1][0].
  BoundaryGap gap[2][2];
  // 1 - Var(G - V) / Var(G) over critic-mask tokens; NaN when Var(G) = 0 or there is no token.
  double explained_variance = 0.0;
  double explained_variance_by_kind[2] = {0.0, 0.0};
  int64_t critic_tokens_by_kind[2] = {0, 0};
};

// V is the batch's sampling-time values, G the returns of `advantages`.
Diagnostics compute_diagnostics(const Batch& batch, const Advantages& advantages);

}  // namespace crl::learners
