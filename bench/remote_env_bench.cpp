// The `remote` environment (envs/remote): steps per second of a Python environment process
// (clients/python/crl_remote_env.py, GuessNumber) over loopback, with the steps of a lockstep round sent as
// one POST /v1/batch/step (the driver's path, DESIGN.md rule 9) against the baseline of one
// POST /v1/episodes/{id}/step per step, in the same run.
//   BM_RemoteEnvStepBatched/N      N episodes: per round prepare_steps() over all N, then N step() calls
//   BM_RemoteEnvStepPerRequest/N   the baseline: N step() calls, one request each
// Each iteration resets the N episodes (not timed) and plays 11 rounds of "guess 0" (GuessNumber truncates
// at 12 turns). Counter items_per_second = environment steps per second.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "envs/registry.h"
#include "envs/remote/remote_env.h"

namespace crl {
namespace {

constexpr int kRounds = 11;

// One Python process for the whole run, reached by port by every benchmark's environments.
int python_port() {
  static const int port = [] {
    static auto anchor = make_env("remote", {{"command", "/usr/bin/python3 " + std::string(CRL_SOURCE_DIR) +
                                                             "/clients/python/crl_remote_env.py --port 0"}});
    Rng rng(StreamKey{});
    anchor->reset(Task{"anchor", 0, ""}, rng);
    return static_cast<RemoteEnv&>(*anchor).port();
  }();
  return port;
}

void run(benchmark::State& state, bool batched) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<std::unique_ptr<Env>> envs;
  for (size_t i = 0; i < n; ++i) {
    envs.push_back(
        make_env("remote", {{"port", std::to_string(python_port())}, {"batch", batched ? "true" : "false"}}));
  }
  std::vector<PendingStep> pending(n);
  int64_t steps = 0;
  uint64_t iteration = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (size_t i = 0; i < n; ++i) {
      Rng rng(StreamKey{7, iteration, static_cast<uint32_t>(i), StreamRole::kEnvironment, 0});
      envs[i]->reset(Task{"guess-" + std::to_string(i), i, ""}, rng);
    }
    ++iteration;
    state.ResumeTiming();
    for (int round = 0; round < kRounds; ++round) {
      if (batched) {
        for (size_t i = 0; i < n; ++i) pending[i] = PendingStep{envs[i].get(), Action{"guess 0", {}}};
        prepare_steps(pending);
      }
      for (size_t i = 0; i < n; ++i) {
        const StepResult r = envs[i]->step(Action{"guess 0", {}});
        benchmark::DoNotOptimize(r.observation.text.data());
        if (r.terminated || r.truncated) state.SkipWithError("an episode ended early");
      }
      steps += static_cast<int64_t>(n);
    }
  }
  state.SetItemsProcessed(steps);
}

void BM_RemoteEnvStepBatched(benchmark::State& state) {
  run(state, true);
}
void BM_RemoteEnvStepPerRequest(benchmark::State& state) {
  run(state, false);
}

BENCHMARK(BM_RemoteEnvStepPerRequest)->Arg(1)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RemoteEnvStepBatched)->Arg(1)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace crl
