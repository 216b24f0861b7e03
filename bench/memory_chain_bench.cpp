// Memory-chain benchmarks (issue 4). Run: build/bench/bench_memory_chain
//   BM_MemoryChainBaselineStep  the same chain as a bare array walk (draw, compare, count): the floor for a
//   step BM_MemoryChainEnvStep       the registered environment: reset + 96 step() calls, both views rendered
//   BM_MemoryChainEpisodeOracle the full episode through Episode (symbolic codec, context, compaction,
//   recorder,
//                               running hash) played by the scripted oracle, one episode per drive() call
//   BM_MemoryChainEpisodeTabular the same with the tabular policy (what scenario training runs)
//   BM_MemoryChainScenario      scenarios/memory_chain.pbtxt end to end (training, evaluation), wall time
// Items are environment steps (96 per episode), so the step benchmarks read as steps per second per core.
#include <benchmark/benchmark.h>

#include <vector>

#include "engine/rng.h"
#include "engine/runner.h"
#include "envs/memory_chain/memory_chain.h"
#include "envs/registry.h"
#include "policies/rollout.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"

namespace crl {
namespace {

constexpr int kLength = 96;

Budget symbolic_budget() {
  return memory_chain_symbolic_budget();
}

// Baseline: the chain's logic with no interface at all: one uniform draw per step into a flat array, reset
// flags from a sorted list, the answer compared at the end.
void BM_MemoryChainBaselineStep(benchmark::State& state) {
  Rng rng(StreamKey{7, 1, 0, StreamRole::kEnvironment, 0});
  std::vector<int> values(kLength);
  const int resets[] = {24, 48, 72};
  int64_t correct = 0;
  for (auto _ : state) {
    for (int s = 0; s < kLength - 1; ++s) values[s] = static_cast<int>(rng.uniform_int(2));
    int compactions = 0;
    for (int step = 1; step < kLength; ++step) {
      for (int r : resets) compactions += step == r;
      benchmark::DoNotOptimize(values[step - 1]);
    }
    correct += values[0] == (compactions & 1);
  }
  benchmark::DoNotOptimize(correct);
  state.SetItemsProcessed(state.iterations() * kLength);
}
BENCHMARK(BM_MemoryChainBaselineStep);

void BM_MemoryChainEnvStep(benchmark::State& state) {
  const auto env = make_env("memory_chain");
  const Action go{"continue", {kMcContinue}};
  const Action answer{"", {kMcValue0}};
  uint64_t episode = 0;
  double reward = 0;
  for (auto _ : state) {
    Rng rng(StreamKey{7, episode++, 0, StreamRole::kEnvironment, 0});
    benchmark::DoNotOptimize(env->reset(Task{"b", 0, ""}, rng));
    for (int step = 1; step < kLength; ++step) benchmark::DoNotOptimize(env->step(go));
    reward += env->step(answer).reward;
  }
  benchmark::DoNotOptimize(reward);
  state.SetItemsProcessed(state.iterations() * kLength);
}
BENCHMARK(BM_MemoryChainEnvStep);

void episode_bench(benchmark::State& state, const std::string& policy_name) {
  const auto prototype = make_env("memory_chain");
  const auto codec = make_codec("symbolic", prototype->spec());
  const auto policy = make_policy(policy_name, {}, PolicyTarget{&prototype->spec(), codec});
  EpisodeConfig config;
  config.budget = symbolic_budget();
  config.seed = 7;
  uint64_t index = 0;
  double reward = 0;
  for (auto _ : state) {
    Episode episode(make_env("memory_chain"), codec, config);
    episode.start(Task{"bench-" + std::to_string(index++), 0, ""});
    Episode* episodes[] = {&episode};
    drive(episodes, *policy);
    reward += episode.reward();
    benchmark::DoNotOptimize(episode.finish());
  }
  benchmark::DoNotOptimize(reward);
  state.SetItemsProcessed(state.iterations() * kLength);
}
void BM_MemoryChainEpisodeOracle(benchmark::State& state) {
  episode_bench(state, "memory_chain_oracle");
}
void BM_MemoryChainEpisodeTabular(benchmark::State& state) {
  episode_bench(state, "tabular");
}
BENCHMARK(BM_MemoryChainEpisodeOracle);
BENCHMARK(BM_MemoryChainEpisodeTabular);

// The whole scenario (2 arms x 3 seeds x 3000 training episodes, 3000 held-out evaluation episodes each,
// curve points every 250 episodes): wall time, with 1 and 2 threads.
void BM_MemoryChainScenario(benchmark::State& state) {
  const scenarios::ScenarioSpec spec =
      scenarios::load_scenario(std::string(CRL_SOURCE_DIR) + "/scenarios/memory_chain.pbtxt");
  scenarios::RunOptions options;
  options.threads = static_cast<int>(state.range(0));
  double joint = 0;
  for (auto _ : state) joint = scenarios::run_scenario(spec, options).arms.front().mean_accuracy;
  state.counters["joint_accuracy"] = joint;
}
BENCHMARK(BM_MemoryChainScenario)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace crl
