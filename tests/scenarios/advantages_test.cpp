// Advantages and critic targets of the scenario runner (spec 1.4) on hand-computed cases.
#include "scenarios/advantages.h"

#include <gtest/gtest.h>

#include <cmath>

namespace crl::scenarios {
namespace {

// A segment whose response has the given values and actor mask (the critic mask equals the actor mask).
Segment segment(SegmentKind kind, std::vector<float> values, std::vector<uint8_t> mask) {
  Segment s;
  s.kind = kind;
  s.values = std::move(values);
  s.actor_mask = mask;
  s.critic_mask = mask;
  s.response_ids.assign(s.values.size(), 0);
  for (uint8_t m : mask) s.n_sampled += m;
  return s;
}

// The memory chain's shape: sum_0, sum_1, sum_2, exec_3 with one sampled token each.
Trajectory chain(double reward, std::vector<float> v) {
  Trajectory t;
  t.reward = reward;
  for (int s = 0; s < 3; ++s) t.segments.push_back(segment(SegmentKind::kSummary, {v[s]}, {1}));
  t.segments.push_back(segment(SegmentKind::kExecution, {0.0f, v[3]}, {0, 1}));
  for (int s = 0; s < 4; ++s) t.segments[s].n_after = 3 - s;
  return t;
}

TEST(Advantages, LambdaOneGivesEveryOneTokenSegmentRMinusV) {
  const auto out = compute_advantages({chain(1.0, {0.5f, 0.25f, 0.0f, 0.75f})}, AdvantageOptions{});
  ASSERT_EQ(out.advantages.size(), 5u);
  EXPECT_DOUBLE_EQ(out.advantages[0], 0.5);
  EXPECT_DOUBLE_EQ(out.advantages[1], 0.75);
  EXPECT_DOUBLE_EQ(out.advantages[2], 1.0);
  EXPECT_DOUBLE_EQ(out.advantages[3], 0.0);  // the forced token of exec_3: skipped
  EXPECT_DOUBLE_EQ(out.advantages[4], 0.25);
  for (size_t i : {0, 1, 2, 4}) EXPECT_DOUBLE_EQ(out.returns[i], 1.0);
  EXPECT_DOUBLE_EQ(out.returns[3], 0.0);  // return = V off the mask
  EXPECT_EQ(out.factor, (std::vector<double>{1, 1, 1, 1}));
}

TEST(Advantages, AdaptiveLambdaWithCorrectionScalesByAThirdPerLaterToken) {
  AdvantageOptions o;
  o.adaptive_lambda = true;
  const auto out = compute_advantages({chain(1.0, {0, 0, 0, 0})}, o);
  EXPECT_NEAR(out.factor[0], 1.0 / 27, 1e-15);
  EXPECT_NEAR(out.factor[1], 1.0 / 9, 1e-15);
  EXPECT_NEAR(out.factor[2], 1.0 / 3, 1e-15);
  EXPECT_EQ(out.factor[3], 1.0);
  EXPECT_NEAR(out.advantages[0], 1.0 / 27, 1e-15);
  EXPECT_NEAR(out.advantages[4], 1.0, 1e-15);
  EXPECT_DOUBLE_EQ(out.returns[0], 1.0);  // the local target ignores the factor
  o.corrected_target = true;
  EXPECT_NEAR(compute_advantages({chain(1.0, {0, 0, 0, 0})}, o).returns[0], 1.0 / 27, 1e-15);
  o.correction = false;
  EXPECT_EQ(compute_advantages({chain(1.0, {0, 0, 0, 0})}, o).factor, (std::vector<double>{1, 1, 1, 1}));
}

TEST(Advantages, MultiTokenSegmentRunsGaeOverSampledPositionsOnly) {
  // Sampled positions 0, 2, 3 (position 1 is an observation) with values 0.1, 0.2, 0.4; R = 1, gamma 0.9,
  // lambda 0.5. Backwards: A3 = 1 - 0.4 = 0.6; A2 = 0.9*0.4 - 0.2 + 0.45*0.6 = 0.43;
  // A0 = 0.9*0.2 - 0.1 + 0.45*0.43 = 0.2735.
  Trajectory t;
  t.reward = 1.0;
  t.segments.push_back(segment(SegmentKind::kExecution, {0.1f, 9.0f, 0.2f, 0.4f}, {1, 0, 1, 1}));
  AdvantageOptions o;
  o.gamma = 0.9;
  o.lambda = 0.5;
  const auto out = compute_advantages({t}, o);
  EXPECT_NEAR(out.advantages[3], 0.6, 1e-6);
  EXPECT_NEAR(out.advantages[2], 0.43, 1e-6);
  EXPECT_NEAR(out.advantages[0], 0.2735, 1e-6);
  EXPECT_EQ(out.advantages[1], 0.0);
  EXPECT_NEAR(out.returns[1], 9.0, 1e-6);
  EXPECT_NEAR(out.returns[0], 0.2735 + 0.1, 1e-6);
}

TEST(Advantages, ZeroRewardAndZeroValuesGiveExactZeros) {
  const auto out =
      compute_advantages({chain(0.0, {0, 0, 0, 0}), chain(0.0, {0, 0, 0, 0})}, AdvantageOptions{});
  for (double a : out.advantages) EXPECT_EQ(a, 0.0);
  for (double g : out.returns) EXPECT_EQ(g, 0.0);
}

}  // namespace
}  // namespace crl::scenarios
