#include "envs/memory_chain/memory_chain.h"

#include <gtest/gtest.h>

#include "engine/error.h"
#include "engine/runner.h"
#include "envs/registry.h"
#include "policies/rollout.h"

namespace crl {
namespace {

std::vector<Trajectory> play(const std::string& view, const std::string& policy_name, size_t episodes,
                             int threads, const Budget& budget) {
  const auto prototype = make_env("memory_chain");
  const auto codec = make_codec(view, prototype->spec());
  const auto policy = make_policy(policy_name, {}, PolicyTarget{&prototype->spec(), codec});
  RolloutSpec spec;
  spec.count = episodes;
  spec.make_episode = [&](size_t i) {
    EpisodeConfig config;
    config.budget = budget;
    config.seed = 29;
    auto e = std::make_unique<Episode>(make_env("memory_chain"), codec, config);
    e->start(Task{"chain-" + std::to_string(i), i, ""});
    return e;
  };
  return run_rollouts(spec, *policy, Runner(threads));
}

Budget symbolic_budget() {
  return memory_chain_symbolic_budget();
}

TEST(MemoryChain, FactAtStepOneQuestionAtTheEndResetsAt24_48_72) {
  auto env = make_env("memory_chain");
  Rng rng(StreamKey{1, 2, 3, StreamRole::kEnvironment, 0});
  const auto start = env->reset(Task{"x", 0, ""}, rng);
  ASSERT_EQ(start.user.symbols.size(), 2u);
  EXPECT_EQ(start.user.symbols[0], kMcFact);
  const int fact = start.user.symbols[1] - kMcValue0;
  std::vector<int> resets;
  for (int step = 1; step < 96; ++step) {
    const StepResult r = env->step(Action{"continue", {kMcContinue}});
    ASSERT_FALSE(r.terminated);
    if (r.request_compaction) resets.push_back(step);
    if (step < 95) {
      EXPECT_EQ(r.observation.symbols[0], kMcNoise);
    }
    if (step == 95) {
      EXPECT_EQ(r.observation.symbols[0], kMcQuery);
    }
  }
  EXPECT_EQ(resets, (std::vector<int>{24, 48, 72}));
  const StepResult answer = env->step(Action{"", {kMcValue0 + fact}});
  EXPECT_TRUE(answer.terminated);
  EXPECT_EQ(answer.reward, 1.0);
}

TEST(MemoryChain, ParametersAreCheckedByName) {
  EXPECT_THROW(make_env("memory_chain", {{"length", "1"}}), Error);
  EXPECT_THROW(make_env("memory_chain", {{"reset_points", "24,x"}}), Error);
  EXPECT_THROW(make_env("memory_chain", {{"reset_points", "200"}}), Error);
  EXPECT_THROW(make_env("memory_chain", {{"lenght", "10"}}), Error);
  auto env = make_env("memory_chain", {{"length", "40"}, {"reset_period", "10"}});
  EXPECT_EQ(dynamic_cast<MemoryChain&>(*env).config().reset_points, (std::vector<int>{10, 20, 30}));
}

TEST(MemoryChain, OracleSolvesBothViewsThroughThreeSummaries) {
  for (const std::string view : {"symbolic", "text"}) {
    Budget budget = symbolic_budget();
    if (view == "text") {
      budget.capacity = 2560;
      budget.reserve = 768;
      budget.per_turn_cap = 64;
      budget.summary_cap = 256;
    }
    const auto trajectories = play(view, "memory_chain_oracle", 20, 2, budget);
    for (const Trajectory& t : trajectories) {
      EXPECT_EQ(t.reward, 1.0) << view;
      EXPECT_EQ(t.compactions, 3) << view;
      EXPECT_EQ(t.status, EpisodeStatus::kCompleted) << view;
    }
    if (view == "symbolic") {
      // exec_0..exec_2 hold only forced actions and are not emitted: sum_0, sum_1, sum_2, exec_3 remain,
      // one trainable token each, N_after = 3, 2, 1, 0 (spec section 2).
      const Trajectory& t = trajectories[0];
      ASSERT_EQ(t.segments.size(), 4u);
      EXPECT_EQ(t.dropped_segments, 3);
      for (size_t s = 0; s < 4; ++s) {
        EXPECT_EQ(t.segments[s].n_sampled, 1);
        EXPECT_EQ(t.segments[s].n_after, 3 - static_cast<int64_t>(s));
      }
    }
  }
}

TEST(MemoryChain, TheTailNeverHoldsTheFact) {
  const auto trajectories = play("symbolic", "memory_chain_oracle", 5, 1, symbolic_budget());
  for (const Trajectory& t : trajectories) {
    const Segment& last = t.segments.back();  // exec_3: prompt = system + resume + 2 tail steps
    for (size_t i = 0; i < last.prompt_ids.size(); ++i) {
      EXPECT_NE(last.prompt_ids[i], kMcFact) << "the fact never reaches the last window except via summaries";
    }
  }
}

}  // namespace
}  // namespace crl
