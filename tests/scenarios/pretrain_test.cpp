// The pretraining stage of an arm (setup.pretrain, proto/scenario.proto): the "competent frozen summarizer"
// baseline trains its summary policy on another task mix inside the same job, then freezes it.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "engine/error.h"
#include "envs/registry.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"
#include "tests/temp_dir.h"

namespace crl::scenarios {
namespace {

// A short memory chain (one reset, so one summary carries the fact), the tabular policy at the spec's rates.
// `frozen`: the summary stays uniform; `pretrained_frozen`: the summary is first trained jointly on another
// task mix (a longer chain with its reset elsewhere), then frozen while the arm trains on this one.
std::string scenario(const std::string& pretrain_arm_extra = "") {
  return R"(name: "pretrain"
base {
  env { name: "memory_chain" params { key: "length" value: "8" } params { key: "reset_points" value: "4" } }
  budget { max_compactions: 1 }
  policy { name: "tabular" }
  learner { actor_lr: 0.5 critic_lr: 0.2 }
  training { episodes: 160 batch_size: 16 eval_episodes: 400 eval_interval: 80 }
}
seeds: [7, 17]
arm { name: "frozen" set { policy { params { key: "frozen_summary" value: "true" } } } }
arm {
  name: "pretrained_frozen"
  set {
    policy { params { key: "frozen_summary" value: "true" } }
    pretrain {
      episodes: 800
      env_params { key: "length" value: "12" }
      env_params { key: "reset_points" value: "6" }
      policy_params { key: "frozen_summary" value: "false" }
      )" +
         pretrain_arm_extra +
         R"(
    }
  }
}
)";
}

RunOptions threads(int n) {
  RunOptions o;
  o.threads = n;
  return o;
}

TEST(Pretrain, AFrozenSummarizerPretrainedOnAnotherTaskMixBeatsTheUniformOne) {
  const ScenarioSpec spec = parse_scenario(scenario(), "pretrain.pbtxt");
  const ScenarioResult result = run_scenario(spec, threads(2));
  ASSERT_EQ(result.arms.size(), 2u);
  const ArmResult& frozen = result.arms[0];
  const ArmResult& pretrained = result.arms[1];
  // The uniform summary keeps the fact a third of the time; the pretrained one learned to keep it.
  EXPECT_LT(frozen.mean_accuracy, 0.8) << frozen.mean_accuracy;
  EXPECT_GT(pretrained.mean_accuracy, frozen.mean_accuracy + 0.2) << pretrained.mean_accuracy;
  // Already at episode 0 of the arm's own training the pretrained policy answers better than chance.
  EXPECT_GT(pretrained.seeds[0].curve.front().eval_accuracy, frozen.seeds[0].curve.front().eval_accuracy);
}

TEST(Pretrain, IsAPureFunctionOfTheSeedForAnyThreadCount) {
  const ScenarioSpec spec = parse_scenario(scenario(), "pretrain.pbtxt");
  const ScenarioResult one = run_scenario(spec, threads(1));
  const ScenarioResult two = run_scenario(spec, threads(2));
  for (size_t a = 0; a < one.arms.size(); ++a) {
    for (size_t s = 0; s < one.arms[a].seeds.size(); ++s) {
      const auto& x = one.arms[a].seeds[s];
      const auto& y = two.arms[a].seeds[s];
      ASSERT_EQ(x.curve.size(), y.curve.size());
      for (size_t i = 0; i < x.curve.size(); ++i)
        EXPECT_EQ(x.curve[i].eval_accuracy, y.curve[i].eval_accuracy);
    }
  }
}

TEST(Pretrain, ResumeFromTheFinalCheckpointDoesNotPretrainAgainAndGivesTheSameResult) {
  const test::TempDir dir("pretrain_test");
  const ScenarioSpec spec = parse_scenario(scenario(), "pretrain.pbtxt");
  RunOptions first = threads(2);
  first.checkpoint_dir = dir.path().string();
  first.seeds = {7};
  const ScenarioResult a = run_scenario(spec, first);
  RunOptions again = first;
  again.resume = true;
  std::atomic<int64_t> episodes{0};  // (episodes_done is called from the worker threads)
  again.episodes_done = [&](int64_t n) { episodes += n; };
  const ScenarioResult b = run_scenario(spec, again);
  EXPECT_EQ(a.arms[1].seeds[0].accuracy, b.arms[1].seeds[0].accuracy);
  // What the resumed run counts (the skipped work at once, then the final evaluation) is the planned total.
  EXPECT_EQ(episodes.load(), planned_episodes(spec, again));
}

TEST(Pretrain, PlannedEpisodesCountThePretraining) {
  const ScenarioSpec spec = parse_scenario(scenario(), "pretrain.pbtxt");
  RunOptions o = threads(1);
  std::atomic<int64_t> counted{0};
  o.seeds = {7};
  o.episodes_done = [&](int64_t n) { counted += n; };
  run_scenario(spec, o);
  EXPECT_EQ(counted.load(), planned_episodes(spec, o));
  // 160 training + 3 evaluations of 400 per arm, and 800 pretraining episodes for one arm.
  EXPECT_EQ(planned_episodes(spec, o), 2 * (160 + 3 * 400) + 800);
}

TEST(Pretrain, BadPretrainingsNameTheField) {
  auto fails = [](const std::string& text, const std::string& what) {
    try {
      parse_scenario(text, "p.pbtxt");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("p.pbtxt:"), std::string::npos) << e.what();
    }
  };
  std::string negative = scenario();
  negative.replace(negative.find("episodes: 800"), 13, "episodes: -1");
  fails(negative, "pretrain.episodes");
  fails(scenario("env_params { key: \"lenght\" value: \"3\" }"), "pretrain.env_params");
  fails(scenario("policy_params { key: \"frozen\" value: \"true\" }"), "pretrain.policy_params");
  std::string scripted = scenario();
  scripted.replace(scripted.find("policy { name: \"tabular\" }"), 26,
                   "policy { name: \"memory_chain_oracle\" }");
  // The oracle declares no frozen_summary: drop the arm's policy params so that only the pretraining is
  // wrong.
  for (size_t at; (at = scripted.find("policy { params { key: \"frozen_summary\" value: \"true\" } }")) !=
                  std::string::npos;) {
    scripted.erase(at, 58);
  }
  scripted.replace(scripted.find("policy_params { key: \"frozen_summary\" value: \"false\" }"), 54, "");
  fails(scripted, "cannot be pretrained");
}

}  // namespace
}  // namespace crl::scenarios

namespace crl::scenarios {
namespace {

// The synthetic suite's `types` parameter (envs/synthetic/task_mix.h): the task mix a frozen summarizer
// is pretrained on, and the per-type breakdown of an evaluation restricted to some types.
TEST(PretrainTaskMix, TheSyntheticTypesParameterRestrictsTheTaskMix) {
  auto env = make_env("synthetic", {{"split", "train"}, {"types", "early_fact,latest_update"}});
  const auto list = env->task_list();
  ASSERT_TRUE(list.has_value());
  auto all = make_env("synthetic", {{"split", "train"}});
  EXPECT_LT(list->size, all->task_list()->size);
  EXPECT_GT(list->size, 0u);
  EXPECT_THROW(make_env("synthetic", {{"types", "early_fact,nope"}}), Error);
  EXPECT_THROW(make_env("synthetic", {{"types", "early_fact,early_fact"}}), Error);
}

TEST(PretrainTaskMix, ANeuralSummarizerPretrainedOnOtherTypesThenFrozenRunsAndIsBrokenDownPerType) {
  const std::string text = R"(name: "mix"
base {
  env { name: "synthetic" params { key: "view" value: "symbolic" } params { key: "split" value: "train" } }
  view: "symbolic"
  budget { capacity: 64 reserve: 16 tail_k: 2 per_turn_cap: 4 summary_cap: 6 max_compactions: 8 }
  policy { name: "neural" params { key: "hidden" value: "16" } }
  learner { actor_lr: 0.02 critic_lr: 0.02 }
  training { episodes: 32 batch_size: 16 eval_episodes: 30 eval_interval: 32
             eval_env_params { key: "split" value: "dev" } eval_env_params { key: "types" value: "ordered_plan" } }
}
seeds: [7]
arm {
  name: "competent_frozen"
  set {
    policy { params { key: "frozen_summary" value: "true" } }
    pretrain { episodes: 32 env_params { key: "types" value: "early_fact,latest_update" }
               policy_params { key: "frozen_summary" value: "false" } }
  }
}
)";
  const ScenarioSpec spec = parse_scenario(text, "mix.pbtxt");
  const ScenarioResult one = run_scenario(spec, threads(1));
  const ScenarioResult two = run_scenario(spec, threads(2));
  EXPECT_EQ(one.arms[0].seeds[0].accuracy, two.arms[0].seeds[0].accuracy);
  // Evaluated on ordered_plan only: every evaluation episode is counted under that type.
  for (const TypeResult& t : one.arms[0].types)
    EXPECT_EQ(t.episodes, t.type == "ordered_plan" ? 30 : 0) << t.type;
}

}  // namespace
}  // namespace crl::scenarios
