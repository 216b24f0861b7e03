// Critic diagnostics (spec 1.7): boundary value gaps by boundary kind and explained variance by segment kind.
#include "learners/diagnostics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/learners/random_batch.h"

namespace crl::learners {
namespace {

TEST(LearnerDiagnosticsTest, BoundaryGapsByKind) {
  Batch b;
  b.begin_rollout(1.0);
  b.add_segment(SegmentKind::kExecution, {0.1, 0.4, 9.0}, {1, 1, 0}, {1, 1, 0});  // last sampled V = 0.4
  b.add_segment(SegmentKind::kSummary, {7.0, 0.3, 0.2}, {0, 1, 1}, {0, 1, 1});    // first 0.3, last 0.2
  b.add_segment(SegmentKind::kExecution, {0.6}, {1}, {1});
  b.begin_rollout(0.0);
  b.add_segment(SegmentKind::kExecution, {0.5}, {1}, {1});
  b.add_segment(SegmentKind::kSummary, {0.0}, {0}, {0});  // no sampled token: skipped
  b.add_segment(SegmentKind::kSummary, {0.9}, {1}, {1});
  const Advantages a = Learner(LearnerOptions{}).advantages(b);
  const Diagnostics d = compute_diagnostics(b, a);
  const BoundaryGap& es = d.gap[0][1];
  EXPECT_EQ(es.count, 2);
  EXPECT_NEAR(es.mean, ((0.4 - 0.3) + (0.5 - 0.9)) / 2.0, 1e-15);
  EXPECT_NEAR(es.mean_abs, (0.1 + 0.4) / 2.0, 1e-15);
  const BoundaryGap& se = d.gap[1][0];
  EXPECT_EQ(se.count, 1);
  EXPECT_NEAR(se.mean, 0.2 - 0.6, 1e-15);
  EXPECT_EQ(d.gap[0][0].count, 0);
}

TEST(LearnerDiagnosticsTest, ExplainedVarianceMatchesTwoPassFormula) {
  const Batch b = testing::random_batch(9);
  const Advantages a = Learner(LearnerOptions{}).advantages(b);
  const Diagnostics d = compute_diagnostics(b, a);
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<double> g, e;
    for (int64_t t = 0; t < b.num_tokens(); ++t) {
      if (b.critic_mask[t] && static_cast<int>(b.kind[t]) == kind) {
        g.push_back(a.returns[t]);
        e.push_back(a.returns[t] - b.values[t]);
      }
    }
    auto var = [](const std::vector<double>& x) {
      double m = 0.0, v = 0.0;
      for (double y : x) m += y;
      m /= x.size();
      for (double y : x) v += (y - m) * (y - m);
      return v / x.size();
    };
    ASSERT_GT(g.size(), 2u);
    EXPECT_EQ(d.critic_tokens_by_kind[kind], static_cast<int64_t>(g.size()));
    EXPECT_NEAR(d.explained_variance_by_kind[kind], 1.0 - var(e) / var(g), 1e-12);
  }
}

TEST(LearnerDiagnosticsTest, PerfectCriticExplainsEverything) {
  Batch b = testing::random_batch(10);
  Advantages a = Learner(LearnerOptions{}).advantages(b);
  a.returns = b.values;  // G = V
  const Diagnostics d = compute_diagnostics(b, a);
  EXPECT_EQ(d.explained_variance, 1.0);
}

}  // namespace
}  // namespace crl::learners
