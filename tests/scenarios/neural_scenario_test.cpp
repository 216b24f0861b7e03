// The synthetic suite with the neural policy (scenarios/synthetic_neural.pbtxt), reduced so it runs in
// seconds: results are byte-identical for any thread count and for a repeated run, the policy learns (the
// full-context control's dev exact match rises from its untrained level), per-type metrics and the per-type
// gates reach the report, and the compacted arms do compact.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "scenarios/report.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"

namespace crl::scenarios {
namespace {

RunOptions threads_and_seeds(int threads, std::vector<uint64_t> seeds = {}) {
  RunOptions options;
  options.threads = threads;
  options.seeds = std::move(seeds);
  return options;
}

ScenarioSpec reduced(int64_t episodes, const std::vector<std::string>& arms) {
  ScenarioSpec spec = load_scenario(std::string(CRL_SOURCE_DIR) + "/scenarios/synthetic_neural.pbtxt");
  std::vector<ArmSpec> kept;
  for (ArmSpec& arm : spec.arms) {
    if (std::find(arms.begin(), arms.end(), arm.name) == arms.end()) continue;
    // Without the shipped file's warm start (tests/scenarios/warm_start_test.cpp covers it): these tests
    // check that RL itself learns, from the untrained network.
    arm.setup.clear_warm_start();
    auto* t = arm.setup.mutable_training();
    t->set_episodes(episodes);
    t->set_eval_episodes(60);
    t->set_eval_interval(episodes);
    t->set_curve_eval_episodes(60);
    kept.push_back(arm);
  }
  spec.arms = kept;
  return spec;
}

const TypeResult& type(const ArmResult& arm, const std::string& name) {
  for (const TypeResult& t : arm.types) {
    if (t.type == name) return t;
  }
  throw std::runtime_error("no type " + name);
}

TEST(NeuralScenario, DeterministicForAnyThreadCountAndLearns) {
  const ScenarioSpec spec = reduced(2560, {"joint", "full_context"});
  const ScenarioResult one = run_scenario(spec, threads_and_seeds(1, {7}));
  const ScenarioResult two = run_scenario(spec, threads_and_seeds(2, {7}));
  EXPECT_EQ(format_summary_json(one), format_summary_json(two));
  EXPECT_EQ(format_curves_csv(one), format_curves_csv(two));
  ASSERT_EQ(one.arms.size(), 2u);
  const ArmResult& full = one.arms[1];
  ASSERT_EQ(full.name, "full_context");
  // Learning signal: the untrained policy answers by a uniform pointer over the records of the question's key
  // (an early fact has one such record, a latest update 3-5, a plan 6-9 steps to order), about 45% of dev;
  // after training the full-context control answers much more. The ordered plan starts near 0.
  const std::vector<CurvePoint>& curve = full.seeds.at(0).curve;
  ASSERT_EQ(curve.size(), 2u);
  EXPECT_LT(curve.front().eval_accuracy, 0.6);
  EXPECT_GT(curve.back().eval_accuracy, curve.front().eval_accuracy + 0.4);
  // Per-type metrics: 20 dev tasks per type in 60 episodes; the control never compacts, the joint arm does.
  ASSERT_EQ(full.types.size(), 3u);
  EXPECT_EQ(type(full, "early_fact").episodes, 20);
  EXPECT_EQ(type(full, "ordered_plan").summaries_per_episode, 0.0);
  const ArmResult& joint = one.arms[0];
  EXPECT_GT(type(joint, "early_fact").summaries_per_episode, 1.5);
  // Every curve point measures the summaries of its evaluation episodes, all types pooled (Fig. 4): the last
  // point's are the final evaluation's, i.e. the mean of the per-type values (20 episodes per type).
  for (const CurvePoint& p : joint.seeds.at(0).curve) EXPECT_EQ(p.summaries.episodes, 60);
  const TypeResult& last = joint.seeds.at(0).curve.back().summaries;
  double per_episode = 0.0, length = 0.0;
  for (const TypeResult& t : joint.seeds.at(0).types) {
    per_episode += t.summaries_per_episode / 3.0;
    length += t.length * t.summaries_per_episode;
  }
  EXPECT_NEAR(last.summaries_per_episode, per_episode, 1e-12);
  EXPECT_NEAR(last.length, length / (3.0 * per_episode), 1e-9);
  EXPECT_GT(last.length, 0.0);
  EXPECT_EQ(curve.back().summaries.summaries_per_episode, 0.0);  // the control never compacts
  const auto json = nlohmann::json::parse(format_summary_json(one));
  EXPECT_TRUE(json["arms"][0]["types"].contains("ordered_plan"));
  const std::string report = format_report(spec, one, "crl run x");
  EXPECT_NE(report.find("## Per task type"), std::string::npos);
  EXPECT_NE(report.find("## Summaries over training"), std::string::npos);
  EXPECT_NE(report.find("joint >= 90% of full_context exact match on early_fact"), std::string::npos);
}

// Issue 15 item 2: with several PPO epochs of shuffled minibatches the run is still byte-identical for any
// thread count, and the curve reports the measured ratio and clip fraction of its actor updates (curves.csv).
TEST(NeuralScenario, PpoEpochsAreDeterministicAndTheCurveShowsTheClip) {
  ScenarioSpec spec = reduced(320, {"joint"});
  auto* l = spec.arms.at(0).setup.mutable_learner();
  l->set_ppo_epochs(3);
  l->set_minibatches(4);
  const ScenarioResult one = run_scenario(spec, threads_and_seeds(1, {7}));
  const ScenarioResult two = run_scenario(spec, threads_and_seeds(2, {7}));
  EXPECT_EQ(format_summary_json(one), format_summary_json(two));
  EXPECT_EQ(format_curves_csv(one), format_curves_csv(two));
  const std::vector<CurvePoint>& curve = one.arms.at(0).seeds.at(0).curve;
  ASSERT_EQ(curve.size(), 2u);
  EXPECT_EQ(curve.front().ppo_updates, 0);
  EXPECT_EQ(curve.back().ppo_updates, 10);  // 320 episodes in batches of 32, one actor update each
  EXPECT_GT(curve.back().mean_abs_ratio, 0.01);
  EXPECT_GT(curve.back().max_ratio, 1.0 + l->clip_epsilon());
  EXPECT_GT(curve.back().clip_fraction, 0.0);
  EXPECT_GT(curve.back().approx_kl, 0.0);
  EXPECT_GT(curve.back().entropy, 0.0);
  EXPECT_NE(format_curves_csv(one).find(",clip_fraction,"), std::string::npos);
}

TEST(NeuralScenario, EvaluationParametersAreCheckedAgainstTheEnvironment) {
  const std::string text = R"(name: "t"
seeds: [1]
base {
  env { name: "synthetic" params { key: "view" value: "symbolic" } params { key: "split" value: "train" } }
  view: "symbolic"
  policy { name: "neural" }
  training { eval_env_params { key: "split" value: "validation" } }
}
arm { name: "a" }
)";
  try {
    parse_scenario(text, "x.pbtxt");
    ADD_FAILURE() << "an unknown evaluation split was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eval_env_params"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("validation"), std::string::npos) << e.what();
  }
  std::string fixed = text;
  fixed.replace(fixed.find("validation"), 10, "dev");
  EXPECT_EQ(parse_scenario(fixed, "x.pbtxt").arms.at(0).setup.training().eval_env_params().at("split"),
            "dev");
}

}  // namespace
}  // namespace crl::scenarios
