// The scenario's learner block drives the CompactionRL learner: on the memory chain's segment shape (sum_0,
// sum_1, sum_2, exec_3, one sampled token each) lambda = 1 gives every summary the full credit R - V, and the
// paper's adaptive lambda scales it by (1/3)^N_after.
#include <gtest/gtest.h>

#include "engine/error.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"

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

// Item (d) of issue 15: every learner switch of learners/options.h and learners/schedule.h is settable from a
// scenario file, and each one set to a non-default value reaches the LearnerOptions / ScheduleOptions the run
// uses. (Before, token_level_normalization, the tokenwise lambda, the stitched target, whitening, KL, value
// clip, the PPO epochs and minibatches and the actor gate were not in the file format.)
std::string scenario_with(const std::string& learner) {
  return "name: \"t\"\nseeds: [1]\nbase {\n  learner {\n" + learner + "\n  }\n}\narm { name: \"a\" }\n";
}

TEST(LearnerOptions, EverySwitchIsSettableFromAScenarioFile) {
  const std::string text = scenario_with(R"(
    gamma: 0.99 lambda_mode: TOKENWISE lambda: 0.9 lambda_alpha: 2.5 correction: false
    critic_target: STITCHED warmup_batches: 50 critic_per_actor: 2 actor_lr: 0.01 critic_lr: 0.03
    summary_loss_masked: true clip_epsilon: 0.1 token_level_normalization: false whiten_advantages: true
    whiten_epsilon: 0.001 positive_only: true value_clip: 0.2 kl_coef: 0.05 ppo_epochs: 4 minibatches: 8
    actor_gate: true gate_threshold: 0.999 correction_segments: SUMMARY)");
  const ScenarioSpec spec = parse_scenario(text, "x.pbtxt");
  const LearnerConfig& l = spec.arms.at(0).setup.learner();
  const learners::LearnerOptions o = learner_options(l);
  EXPECT_EQ(o.gamma, 0.99);
  EXPECT_EQ(o.lambda_mode, learners::LambdaMode::kTokenwise);
  EXPECT_EQ(o.lambda, 0.9);
  EXPECT_EQ(o.lambda_alpha, 2.5);
  EXPECT_FALSE(o.correction);
  EXPECT_EQ(o.critic_target, learners::CriticTarget::kStitched);
  EXPECT_EQ(o.correction_segments, learners::CorrectionSegments::kSummary);
  EXPECT_TRUE(o.summary_loss_masked);
  EXPECT_EQ(o.clip_epsilon, 0.1);
  EXPECT_FALSE(o.token_level_normalization);
  EXPECT_TRUE(o.whiten_advantages);
  EXPECT_EQ(o.whiten_epsilon, 0.001);
  EXPECT_TRUE(o.positive_only);
  EXPECT_EQ(o.value_clip, 0.2);
  EXPECT_EQ(o.kl_coef, 0.05);
  EXPECT_EQ(o.ppo_epochs, 4);
  EXPECT_EQ(o.minibatches, 8);
  const learners::ScheduleOptions s = schedule_options(l);
  EXPECT_EQ(s.warmup_batches, 50);
  EXPECT_EQ(s.critic_per_actor, 2);
  EXPECT_TRUE(s.actor_gate);
  EXPECT_EQ(s.gate_threshold, 0.999);
  EXPECT_TRUE(s.positive_only);
  EXPECT_EQ(l.actor_lr(), 0.01);
  EXPECT_EQ(l.critic_lr(), 0.03);
  // The remaining enum values map too.
  EXPECT_EQ(learner_options(
                parse_scenario(scenario_with("lambda_mode: ADAPTIVE critic_target: CORRECTED"), "x.pbtxt")
                    .arms.at(0)
                    .setup.learner())
                .critic_target,
            learners::CriticTarget::kCorrected);
  EXPECT_EQ(learner_options(parse_scenario(scenario_with("correction_segments: EXECUTION"), "x.pbtxt")
                                .arms.at(0)
                                .setup.learner())
                .correction_segments,
            learners::CorrectionSegments::kExecution);
  // Defaults: one PPO epoch over one minibatch, token-level normalization on, the correction everywhere.
  const learners::LearnerOptions d = learner_options(LearnerConfig());
  EXPECT_EQ(d.correction_segments, learners::CorrectionSegments::kAll);
  EXPECT_EQ(d.ppo_epochs, 1);
  EXPECT_EQ(d.minibatches, 1);
  EXPECT_TRUE(d.token_level_normalization);
  EXPECT_FALSE(d.whiten_advantages);
}

// Bad values get a typed error naming the field (file:line:column: field 'base.learner.<name>'), never a
// crash or a silently clamped value.
TEST(LearnerOptions, BadValuesNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ppo_epochs: 0", "ppo_epochs"},
      {"minibatches: -1", "minibatches"},
      {"whiten_epsilon: 0", "whiten_epsilon"},
      {"clip_epsilon: 1.5", "clip_epsilon"},
      {"value_clip: -0.1", "value_clip"},
      {"kl_coef: -1", "kl_coef"},
      {"lambda_alpha: 0.5", "lambda_alpha"},
      {"gamma: 2", "gamma"},
      {"lambda: -0.5", "lambda"},
      {"warmup_batches: -1", "warmup_batches"},
      {"critic_per_actor: -2", "critic_per_actor"},
      {"actor_lr: -1", "actor_lr"},
      {"critic_lr: nan", "critic_lr"},
      {"gate_threshold: inf", "gate_threshold"},
      {"whiten_epsilon: inf", "whiten_epsilon"},
  };
  for (const auto& [line, field] : cases) {
    try {
      parse_scenario(scenario_with(line), "x.pbtxt");
      ADD_FAILURE() << line << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("learner." + field), std::string::npos)
          << line << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("x.pbtxt:"), std::string::npos) << line << ": " << e.what();
    }
  }
  // An unknown enum value is a parse error naming the value.
  try {
    parse_scenario(scenario_with("lambda_mode: PER_TOKEN"), "x.pbtxt");
    ADD_FAILURE() << "an unknown lambda mode was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("PER_TOKEN"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace crl::scenarios
