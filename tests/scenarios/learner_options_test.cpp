// The scenario's learner block drives the CompactionRL learner: on the memory chain's segment shape (sum_0,
// sum_1, sum_2, exec_3, one sampled token each) lambda = 1 gives every summary the full credit R - V, and the
// paper's adaptive lambda scales it by (1/3)^N_after.
#include <gtest/gtest.h>

#include "learners/batch.h"
#include "learners/learner.h"
#include "scenarios/runner.h"

namespace crl::scenarios {
namespace {

using proto::scenario::LearnerConfig;

Segment one_token(SegmentKind kind, float value, int64_t n_after, int forced_before = 0) {
  Segment s;
  s.kind = kind;
  for (int i = 0; i < forced_before; ++i) {
    s.response_ids.push_back(4);
    s.response_provenance.push_back(Provenance::kForced);
    s.actor_mask.push_back(0);
    s.critic_mask.push_back(0);
    s.values.push_back(0.0f);
    s.logprobs.push_back(0.0f);
  }
  s.response_ids.push_back(9);
  s.response_provenance.push_back(Provenance::kSampled);
  s.actor_mask.push_back(1);
  s.critic_mask.push_back(1);
  s.values.push_back(value);
  s.logprobs.push_back(-0.5f);
  s.n_sampled = 1;
  s.n_after = n_after;
  return s;
}

Trajectory chain(double reward, float v) {
  Trajectory t;
  t.rollout_id = "r";
  t.reward = reward;
  for (int s = 0; s < 3; ++s) t.segments.push_back(one_token(SegmentKind::kSummary, v, 3 - s));
  t.segments.push_back(one_token(SegmentKind::kExecution, v, 0, 2));
  return t;
}

learners::Advantages advantages(const LearnerConfig& config, const Trajectory& t) {
  return learners::Learner(learner_options(config)).advantages(learners::make_batch({t}));
}

TEST(LearnerOptions, SchemaDefaultsAreTheSpecsMainArm) {
  const LearnerConfig config;
  const learners::LearnerOptions o = learner_options(config);
  EXPECT_EQ(o.gamma, 1.0);
  EXPECT_EQ(o.lambda_mode, learners::LambdaMode::kFixed);
  EXPECT_EQ(o.lambda, 1.0);
  EXPECT_TRUE(o.correction);
  EXPECT_EQ(o.critic_target, learners::CriticTarget::kLocal);
  EXPECT_EQ(config.actor_lr(), 0.5);
  EXPECT_EQ(config.critic_lr(), 0.2);
  EXPECT_EQ(schedule_options(config).warmup_batches, 0);
  EXPECT_EQ(schedule_options(config).critic_per_actor, 1);
}

TEST(LearnerOptions, LambdaOneGivesEverySummaryRMinusV) {
  const learners::Advantages a = advantages(LearnerConfig(), chain(1.0, 0.25f));
  ASSERT_EQ(a.advantages.size(), 6u);  // 3 summaries + 2 forced + the answer
  for (size_t i : {0, 1, 2, 5}) {
    EXPECT_DOUBLE_EQ(a.advantages[i], 0.75) << i;
    EXPECT_DOUBLE_EQ(a.returns[i], 1.0) << i;
  }
  EXPECT_EQ(a.advantages[3], 0.0);  // forced CONTINUE: no credit
  EXPECT_EQ(a.factor, (std::vector<double>{1, 1, 1, 1}));
}

TEST(LearnerOptions, PaperLambdaScalesEarlySummariesByAThirdPerLaterToken) {
  LearnerConfig config;
  config.set_lambda_mode(LearnerConfig::ADAPTIVE);
  const learners::Advantages a = advantages(config, chain(1.0, 0.0f));
  EXPECT_NEAR(a.factor[0], 1.0 / 27, 1e-12);
  EXPECT_NEAR(a.factor[1], 1.0 / 9, 1e-12);
  EXPECT_NEAR(a.factor[2], 1.0 / 3, 1e-12);
  EXPECT_NEAR(a.advantages[0], 1.0 / 27, 1e-12);
  EXPECT_NEAR(a.advantages[5], 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(a.returns[0], 1.0);  // the local critic target ignores the factor
  config.set_correction(false);
  EXPECT_EQ(advantages(config, chain(1.0, 0.0f)).factor, (std::vector<double>{1, 1, 1, 1}));
}

TEST(LearnerOptions, ZeroRewardAndZeroValuesGiveExactZeros) {
  const learners::Advantages a = advantages(LearnerConfig(), chain(0.0, 0.0f));
  for (double x : a.advantages) EXPECT_EQ(x, 0.0);
  for (double x : a.returns) EXPECT_EQ(x, 0.0);
}

}  // namespace
}  // namespace crl::scenarios
