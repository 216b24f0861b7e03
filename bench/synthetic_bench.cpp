// Console environment `synthetic`: steps per second on one core, text and symbolic views, played by a
// scripted policy (the oracle's 17 x `next` + `submit`, actions prepared up front so only the environment is
// timed). Baselines in the same binary: copying the observations an episode returns (the least any env that
// hands out fresh observations must do), in each view.
#include <benchmark/benchmark.h>

#include "envs/registry.h"
#include "envs/synthetic/symbolic.h"
#include "envs/synthetic/synthetic_env.h"

namespace {

namespace syn = crl::envs::synthetic;

struct Script {
  std::string task_id;
  std::vector<crl::Action> actions;            // what the env is sent
  std::vector<crl::Observation> observations;  // what it returns (for the baselines)
};

// The scripted play of every dev task in one view.
std::vector<Script> make_scripts(const std::string& view) {
  auto env = crl::make_env("synthetic", {{"view", view}});
  auto& synthetic = dynamic_cast<syn::SyntheticEnv&>(*env);
  const bool symbolic = view == "symbolic";
  const syn::Vocabulary& v = syn::Vocabulary::get();
  std::vector<Script> scripts;
  crl::Rng rng(crl::StreamKey{});
  for (const syn::SyntheticTask& t : synthetic.tasks().tasks) {
    Script s{t.task_id, {}, {}};
    for (int i = 0; i <= syn::kRecordsPerTask; ++i) {
      s.actions.push_back(symbolic ? crl::Action{"", {v.next}} : crl::Action{"next", {}});
    }
    s.actions.push_back(symbolic ? crl::Action{"", syn::symbolic_submit(t.type, t.answer)}
                                 : crl::Action{"submit " + t.answer, {}});
    env->reset(crl::Task{t.task_id, 0, ""}, rng);
    for (const crl::Action& a : s.actions) s.observations.push_back(env->step(a).observation);
    scripts.push_back(std::move(s));
  }
  return scripts;
}

void run_env(benchmark::State& state, const std::string& view) {
  const std::vector<Script> scripts = make_scripts(view);
  auto env = crl::make_env("synthetic", {{"view", view}});
  crl::Rng rng(crl::StreamKey{});
  size_t next = 0;
  int64_t steps = 0;
  double reward = 0;
  for (auto _ : state) {
    const Script& s = scripts[next++ % scripts.size()];
    env->reset(crl::Task{s.task_id, 0, ""}, rng);
    for (const crl::Action& a : s.actions) {
      crl::StepResult r = env->step(a);
      benchmark::DoNotOptimize(r);
      reward += r.reward;
    }
    steps += static_cast<int64_t>(s.actions.size());
  }
  if (reward != static_cast<double>(state.iterations()))
    state.SkipWithError("the scripted policy lost an episode");
  state.SetItemsProcessed(steps);
}

void copy_observations(benchmark::State& state, const std::string& view) {
  const std::vector<Script> scripts = make_scripts(view);
  size_t next = 0;
  int64_t steps = 0;
  for (auto _ : state) {
    const Script& s = scripts[next++ % scripts.size()];
    for (const crl::Observation& o : s.observations) {
      crl::StepResult r;
      r.observation = o;  // one fresh observation per step, as step() returns
      benchmark::DoNotOptimize(r);
    }
    steps += static_cast<int64_t>(s.observations.size());
  }
  state.SetItemsProcessed(steps);
}

void BM_SyntheticStepText(benchmark::State& state) {
  run_env(state, "text");
}
void BM_SyntheticStepSymbolic(benchmark::State& state) {
  run_env(state, "symbolic");
}
void BM_SyntheticStepBothViews(benchmark::State& state) {
  run_env(state, "both");
}
void BM_BaselineCopyObservationText(benchmark::State& state) {
  copy_observations(state, "text");
}
void BM_BaselineCopyObservationSymbolic(benchmark::State& state) {
  copy_observations(state, "symbolic");
}

BENCHMARK(BM_BaselineCopyObservationText)->MinWarmUpTime(0.2);
BENCHMARK(BM_SyntheticStepText)->MinWarmUpTime(0.2);
BENCHMARK(BM_BaselineCopyObservationSymbolic)->MinWarmUpTime(0.2);
BENCHMARK(BM_SyntheticStepSymbolic)->MinWarmUpTime(0.2);
BENCHMARK(BM_SyntheticStepBothViews)->MinWarmUpTime(0.2);

}  // namespace
