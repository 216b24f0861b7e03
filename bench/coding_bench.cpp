// Benchmarks of the coding-style environments (bench/RESULTS.md, "Coding environments").
//  * coding_repo steps per second per core: a fixed command cycle (ls, cat, grep, run_tests, edit, cat) on
//    one task; baseline: the same number of memory_chain steps in the same binary.
//  * coding_repo full solver episodes under the coding budget (Episode + context + compaction + solver).
//  * shell episode overhead: reset (scratch copy of the task folder, hidden tests) + one `true` command in
//    the sandbox + the scratch removal; against the baseline of a bare fork + exec of /bin/true, and the
//    sandboxed command alone.
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include "envs/coding_repo/coding_repo.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "envs/shell/sandbox.h"
#include "envs/shell/shell_env.h"
#include "policies/policy.h"
#include "policies/rollout.h"

namespace crl {
namespace {

const std::string kSource = CRL_SOURCE_DIR;

void BM_BaselineMemoryChainStep(benchmark::State& state) {
  auto env = make_env("memory_chain", {{"length", "1000000"}});
  Rng rng(StreamKey{});
  env->reset(Task{"b", 0, ""}, rng);
  const Action a{"continue", {}};
  for (auto _ : state) {
    if (env->done()) env->reset(Task{"b", 0, ""}, rng);
    benchmark::DoNotOptimize(env->step(a));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BaselineMemoryChainStep);

void BM_CodingRepoStep(benchmark::State& state) {
  auto env = make_env("coding_repo", {{"max_turns", "1000000000"}});
  Rng rng(StreamKey{});
  env->reset(Task{"repo-operator-bench-0", 0, ""}, rng);
  const auto& project = static_cast<CodingRepo&>(*env).project();
  const std::vector<Action> cycle = {{"ls", {}},
                                     {"cat " + project.bug_file, {}},
                                     {"grep def " + project.bug_function + "(", {}},
                                     {"run_tests", {}},
                                     {"edit " + project.bug_file + " 1 # edited", {}},
                                     {"cat README.md 1 10", {}}};
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(env->step(cycle[i]));
    i = (i + 1) % cycle.size();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CodingRepoStep);

void BM_CodingRepoRunTests(benchmark::State& state) {
  auto env = make_env("coding_repo", {{"max_turns", "1000000000"}});
  Rng rng(StreamKey{});
  env->reset(Task{"repo-operator-bench-0", 0, ""}, rng);
  const Action run{"run_tests", {}};
  for (auto _ : state) benchmark::DoNotOptimize(env->step(run));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CodingRepoRunTests);

void BM_CodingRepoReset(benchmark::State& state) {
  auto env = make_env("coding_repo");
  Rng rng(StreamKey{});
  uint64_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(env->reset(Task{"repo-constant-bench-" + std::to_string(n % 64), n, ""}, rng));
    ++n;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CodingRepoReset);

// Whole episodes: the solver through Episode (context, compactions, recorder); items = environment steps.
void BM_CodingRepoSolverEpisode(benchmark::State& state) {
  const auto probe = make_env("coding_repo");
  const auto codec = make_codec("text", probe->spec());
  const auto solver = make_policy("coding_repo_solver", {}, PolicyTarget{&probe->spec(), codec});
  int64_t steps = 0, compactions = 0, episodes = 0;
  uint64_t n = 0;
  for (auto _ : state) {
    EpisodeConfig config;
    config.budget = coding_budget();
    Episode episode(make_env("coding_repo"), codec, config);
    episode.start(Task{"repo-comparison-bench-" + std::to_string(n % 16), n, ""});
    ++n;
    Episode* one[] = {&episode};
    drive(one, *solver);
    steps += episode.turn();
    compactions += episode.context().compactions();
    ++episodes;
  }
  state.SetItemsProcessed(steps);
  state.counters["compactions_per_episode"] =
      static_cast<double>(compactions) / static_cast<double>(episodes);
  state.counters["steps_per_episode"] = static_cast<double>(steps) / static_cast<double>(episodes);
}
BENCHMARK(BM_CodingRepoSolverEpisode)->Unit(benchmark::kMillisecond);

void BM_BaselineForkExecTrue(benchmark::State& state) {
  for (auto _ : state) {
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/true", "true", static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BaselineForkExecTrue)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SandboxTrue(benchmark::State& state) {
  shell::SandboxLimits limits;
  limits.use_namespaces = state.range(0) != 0;
  const std::string dir = "/tmp/crl-shell-bench-sandbox";
  std::system(("mkdir -p " + dir + "/app " + dir + "/logs").c_str());
  for (auto _ : state)
    benchmark::DoNotOptimize(shell::run_sandboxed("true", {dir + "/app", "", dir + "/logs"}, limits));
  std::system(("rm -rf " + dir).c_str());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SandboxTrue)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

// One shell episode's overhead: reset (scratch copy) + one `true` + submit-free teardown (the next reset).
void BM_ShellEpisodeOverhead(benchmark::State& state) {
  auto env = make_env("shell", {{"tasks_dir", kSource + "/data/shell_tasks"},
                                {"scratch_root", "/tmp/crl-shell-bench"},
                                {"namespaces", state.range(0) ? "true" : "false"}});
  Rng rng(StreamKey{});
  for (auto _ : state) {
    env->reset(Task{"count-errors", 0, ""}, rng);
    benchmark::DoNotOptimize(env->step(Action{"true", {}}));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ShellEpisodeOverhead)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ShellResetOnly(benchmark::State& state) {
  auto env = make_env(
      "shell", {{"tasks_dir", kSource + "/data/shell_tasks"}, {"scratch_root", "/tmp/crl-shell-bench"}});
  Rng rng(StreamKey{});
  for (auto _ : state) benchmark::DoNotOptimize(env->reset(Task{"count-errors", 0, ""}, rng));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ShellResetOnly)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace crl
