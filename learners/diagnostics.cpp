#include "learners/diagnostics.h"

#include <cmath>
#include <limits>

namespace crl::learners {

namespace {

// Var(G - V) and Var(G) by Welford's online update: one pass, and stable when the returns are large next to
// their spread (a plain sum-of-squares formula would cancel).
struct VarianceSums {
  int64_t n = 0;
  double mean_g = 0.0, m2_g = 0.0, mean_e = 0.0, m2_e = 0.0;
  void add(double ret, double value) {
    ++n;
    const double dn = static_cast<double>(n);
    const double dg = ret - mean_g;
    mean_g += dg / dn;
    m2_g += dg * (ret - mean_g);
    const double e = ret - value;
    const double de = e - mean_e;
    mean_e += de / dn;
    m2_e += de * (e - mean_e);
  }
  double explained() const {
    if (n == 0 || !(m2_g > 0.0)) return std::numeric_limits<double>::quiet_NaN();
    return 1.0 - m2_e / m2_g;
  }
};

}  // namespace

Diagnostics compute_diagnostics(const Batch& batch, const Advantages& advantages) {
  Diagnostics d;
  const auto& seg = batch.segment_offsets;
  const auto& mask = batch.critic_mask;
  // Boundary gaps: walk each rollout's non-empty segments in order and compare the last sampled value of
  // one with the first sampled value of the next.
  for (int64_t r = 0; r < batch.num_rollouts(); ++r) {
    bool have_prev = false;
    double prev_last = 0.0;
    int prev_kind = 0;
    for (int64_t s = batch.rollout_offsets[r]; s < batch.rollout_offsets[r + 1]; ++s) {
      int64_t first = -1, last = -1;
      for (int64_t t = seg[s]; t < seg[s + 1]; ++t) {
        if (mask[t]) {
          if (first < 0) first = t;
          last = t;
        }
      }
      if (first < 0) continue;
      const int kind = static_cast<int>(batch.segment_kind[s]);
      if (have_prev) {
        BoundaryGap& g = d.gap[prev_kind][kind];
        const double gap = prev_last - batch.values[first];
        ++g.count;
        g.mean += gap;
        g.mean_abs += std::abs(gap);
      }
      have_prev = true;
      prev_last = batch.values[last];
      prev_kind = kind;
    }
  }
  for (auto& row : d.gap) {
    for (BoundaryGap& g : row) {
      if (g.count > 0) {
        g.mean /= static_cast<double>(g.count);
        g.mean_abs /= static_cast<double>(g.count);
      }
    }
  }
  VarianceSums all, by_kind[2];
  for (int64_t t = 0; t < batch.num_tokens(); ++t) {
    if (!mask[t]) continue;
    all.add(advantages.returns[t], batch.values[t]);
    by_kind[static_cast<int>(batch.kind[t])].add(advantages.returns[t], batch.values[t]);
  }
  d.explained_variance = all.explained();
  for (int k = 0; k < 2; ++k) {
    d.explained_variance_by_kind[k] = by_kind[k].explained();
    d.critic_tokens_by_kind[k] = by_kind[k].n;
  }
  return d;
}

}  // namespace crl::learners
