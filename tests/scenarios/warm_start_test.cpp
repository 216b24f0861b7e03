// The warm start of a scenario job (setup.warm_start, proto WarmStartConfig; scenarios/warm_start.h): oracle
// demonstrations of the synthetic suite, then supervised steps on the demonstrator's answers only.
#include "scenarios/warm_start.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/error.h"
#include "envs/registry.h"
#include "policies/neural/neural_policy.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"

namespace crl::scenarios {
namespace {

// The hard symbolic view with the shortcut-free features, as scenarios/ablation_table.pbtxt; no RL (0
// training episodes), so the accuracy measured is the warm-started base model's.
std::string scenario(const std::string& warm, const std::string& extra = "") {
  return R"(name: "warm"
base {
  env {
    name: "synthetic"
    params { key: "namespace" value: "hard" }
    params { key: "view" value: "symbolic" }
    params { key: "split" value: "train" }
  }
  budget { capacity: 512 reserve: 16 tail_k: 2 per_turn_cap: 4 summary_cap: 4 max_compactions: 16 }
  policy { name: "neural" params { key: "hidden" value: "64" } params { key: "features" value: "raw" } }
  )" + warm +
         R"(
  training { episodes: 0 batch_size: 32 eval_episodes: 90 eval_interval: 100
             eval_env_params { key: "split" value: "dev" } }
  )" + extra +
         R"(
}
seeds: [7]
arm { name: "full_context" }
)";
}

RunOptions threads(int n) {
  RunOptions o;
  o.threads = n;
  return o;
}

std::string parse_error(const std::string& text) {
  try {
    parse_scenario(text, "warm.pbtxt");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(WarmStart, TeachesTheBaseModelToAnswerFromTheWholeLog) {
  // Without a warm start the untrained network picks among up to 48 records (near 0%); 2,000 full-context
  // demonstrations x 3 passes teach it to read (measured: well above half of the dev episodes).
  const double cold =
      run_scenario(parse_scenario(scenario(""), "warm.pbtxt"), threads(2)).arms[0].mean_accuracy;
  const double warm =
      run_scenario(
          parse_scenario(scenario("warm_start { episodes: 2000 epochs: 3 capacity: 512 }"), "warm.pbtxt"),
          threads(2))
          .arms[0]
          .mean_accuracy;
  EXPECT_LT(cold, 0.1) << cold;
  EXPECT_GT(warm, 0.5) << warm;
}

TEST(WarmStart, IsAPureFunctionOfTheSeedForAnyThreadCount) {
  const ScenarioSpec spec =
      parse_scenario(scenario("warm_start { episodes: 200 epochs: 2 capacity: 512 }"), "warm.pbtxt");
  const ScenarioResult one = run_scenario(spec, threads(1));
  const ScenarioResult two = run_scenario(spec, threads(2));
  EXPECT_EQ(one.arms[0].mean_accuracy, two.arms[0].mean_accuracy);
  EXPECT_EQ(one.arms[0].seeds[0].curve.front().eval_accuracy,
            two.arms[0].seeds[0].curve.front().eval_accuracy);
}

// The demonstrations under a compaction budget carry the oracle's summaries; they must not be imitated
// (what to keep is what the arms compare): the summary head's own weights stay where they were.
TEST(WarmStart, NeverImitatesTheOraclesSummaries) {
  const auto env = make_env("synthetic", {{"namespace", "hard"}, {"view", "symbolic"}, {"split", "train"}});
  EpisodeSetup setup;
  setup.env = "synthetic";
  setup.params = {{"namespace", "hard"}, {"view", "symbolic"}, {"split", "train"}};
  setup.codec = make_codec("symbolic", env->spec());
  setup.budget = Budget{};
  setup.budget.capacity = 64;
  setup.budget.reserve = 16;
  setup.budget.tail_k = 2;
  setup.budget.per_turn_cap = 4;
  setup.budget.summary_cap = 4;
  setup.budget.max_compactions = 16;
  const std::vector<Trajectory> demos = oracle_demonstrations(setup, 7, 0, 8, "test");
  int summaries = 0;
  for (const Trajectory& t : demos) {
    for (const Segment& s : t.segments) summaries += s.kind == SegmentKind::kSummary;
  }
  ASSERT_GT(summaries, 8);
  // With the whole log in the context the oracle answers every task right.
  EpisodeSetup full = setup;
  full.budget.capacity = 512;
  for (const Trajectory& t : oracle_demonstrations(full, 7, 0, 12, "test"))
    EXPECT_EQ(t.reward, 1.0) << t.rollout_id;

  neural::NeuralConfig config;
  config.features = "raw";
  neural::NeuralPolicy policy(PolicyTarget{&env->spec(), setup.codec}, config);
  policy.initialize(7);
  const std::vector<float> before = policy.network().parameters();
  const double loss = policy.imitate(demos, 0.01);
  const std::vector<float>& after = policy.network().parameters();
  EXPECT_GT(loss, 0.0);
  const neural::NetworkShape& shape = policy.network().shape();
  int moved_answer = 0;
  for (int64_t i = shape.w(0); i < shape.w(neural::NeuralPolicy::kSummaryHead); ++i)
    moved_answer += before[i] != after[i];
  EXPECT_GT(moved_answer, 0);
  for (int64_t i = shape.w(neural::NeuralPolicy::kSummaryHead); i < shape.w(shape.heads); ++i)
    ASSERT_EQ(before[i], after[i]) << "summary head weight " << i;
  ASSERT_EQ(before[shape.b(neural::NeuralPolicy::kSummaryHead)],
            after[shape.b(neural::NeuralPolicy::kSummaryHead)]);
  for (int64_t i = shape.wv(); i < shape.size(); ++i) ASSERT_EQ(before[i], after[i]) << "value head " << i;
}

TEST(WarmStart, BadSettingsNameTheField) {
  EXPECT_NE(parse_error(scenario("warm_start { episodes: -1 }")).find("warm_start.episodes"),
            std::string::npos);
  EXPECT_NE(parse_error(scenario("warm_start { episodes: 10 batch_size: 0 }")).find("warm_start.batch_size"),
            std::string::npos);
  EXPECT_NE(parse_error(scenario("warm_start { episodes: 10 epochs: 0 }")).find("warm_start.epochs"),
            std::string::npos);
  EXPECT_NE(parse_error(scenario("warm_start { episodes: 10 lr: 0 }")).find("warm_start.lr"),
            std::string::npos);
  EXPECT_NE(parse_error(scenario("warm_start { episodes: 10 capacity: -5 }")).find("warm_start.capacity"),
            std::string::npos);
  // A capacity the budget's guards refuse (below the reserve).
  EXPECT_NE(parse_error(scenario("warm_start { episodes: 10 capacity: 8 }")).find("warm_start.capacity"),
            std::string::npos);
  // A policy that does not learn from demonstrations (tabular) and an environment without an oracle.
  const std::string tabular = R"(name: "warm"
base {
  env { name: "memory_chain" params { key: "length" value: "8" } params { key: "reset_points" value: "4" } }
  policy { name: "tabular" }
  warm_start { episodes: 10 }
}
seeds: [7]
arm { name: "a" }
)";
  const std::string error = parse_error(tabular);
  EXPECT_NE(error.find("warm_start"), std::string::npos) << error;
  EXPECT_NE(error.find("oracle"), std::string::npos) << error;
}

}  // namespace
}  // namespace crl::scenarios
