// `crl run`: runs episodes of an environment with a policy and reports them. Without a scenario file it runs
// the built-in demo: one memory-chain episode in the text view, played by the memory-chain oracle, with its
// compactions printed as a readable trace.
#include <iostream>

#include "cli/command.h"
#include "cli/episode_options.h"
#include "engine/error.h"
#include "engine/runner.h"
#include "engine/sha256.h"
#include "engine/trace.h"
#include "engine/trajectory_io.h"
#include "envs/registry.h"
#include "policies/rollout.h"

namespace crl::cli {
namespace {

int run_command(const std::vector<std::string>& args) {
  EpisodeOptions episode;
  // The demo's budget: the spec's memory chain (resets after steps 24, 48, 72) in the text view, where a
  // step costs about 44 byte tokens and the summary instruction about 350: a window of 24 steps plus the
  // summary request fits C - summary_cap, so every compaction comes from the chain's reset points.
  episode.budget.capacity = 2560;
  episode.budget.reserve = 768;
  std::string policy_name = "memory_chain_oracle";
  std::string scenario, out_path;
  int episodes = 1, threads = 1;
  bool trace = true, full = false;
  po::options_description options;
  episode.add_to(options);
  options.add_options()("policy", po::value(&policy_name)->default_value(policy_name), "policy name")(
      "episodes", po::value(&episodes)->default_value(episodes), "number of episodes")(
      "threads", po::value(&threads)->default_value(threads), "worker threads (results do not depend on it)")(
      "out", po::value(&out_path), "write the trajectories here (.jsonl, or binary protobuf otherwise)")(
      "trace", po::value(&trace)->default_value(trace), "print the first episode as a readable trace")(
      "full", po::bool_switch(&full), "print every run of tokens in the trace")(
      "scenario", po::value(&scenario), "scenario file (protobuf text format)");
  po::positional_options_description positional;
  positional.add("scenario", 1);
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("run", "[SCENARIO] [options]", options, positional, args, vm, exit_code))
    return exit_code;
  if (!scenario.empty()) {
    std::cerr
        << "crl run: scenario files are not built yet (tracked in issue 4); run without one for the demo\n";
    return 2;
  }
  if (episodes < 1)
    throw Error("option --episodes", "", "value " + std::to_string(episodes) + " must be >= 1");
  if (threads < 1) throw Error("option --threads", "", "value " + std::to_string(threads) + " must be >= 1");
  episode.budget.validate("budget options");

  const auto params = episode.param_map();
  const auto prototype = make_env(episode.env, params, "option --env/--param");
  const auto codec = make_codec(episode.view, prototype->spec());
  const auto policy =
      make_policy(policy_name, {}, PolicyTarget{&prototype->spec(), codec}, "option --policy");

  RolloutSpec spec;
  spec.count = static_cast<size_t>(episodes);
  spec.make_episode = [&](size_t i) {
    EpisodeConfig config;
    config.budget = episode.budget;
    config.seed = episode.seed;
    config.sample_index = static_cast<int64_t>(i);
    auto run = std::make_unique<Episode>(make_env(episode.env, params), codec, config);
    run->start(Task{"demo-" + std::to_string(i), i, ""});
    return run;
  };
  const std::vector<Trajectory> trajectories = run_rollouts(spec, *policy, Runner(threads));

  if (trace) {
    TraceOptions trace_options;
    if (full) trace_options.runs_shown = 0;
    const Decoder decode = [&](std::span<const TokenId> ids) { return codec->decode(ids); };
    std::cout << format_trace(trajectories.front(), decode, trace_options) << "\n";
  }
  double reward = 0;
  int compactions = 0;
  Sha256 all;
  for (const Trajectory& t : trajectories) {
    reward += t.reward;
    compactions += t.compactions;
    all.update(t.hash());
  }
  std::cout << "episodes " << trajectories.size() << ", mean reward " << reward / trajectories.size()
            << ", compactions " << compactions << ", trajectories hash " << all.hex_digest().substr(0, 16)
            << "\n";
  if (!out_path.empty()) {
    write_trajectories(out_path, trajectories);
    std::cout << "wrote " << out_path << "\n";
  }
  return 0;
}

const CommandRegistrar kRegistrar({"run", "run episodes (without a scenario: the compaction demo)",
                                   run_command});

}  // namespace
}  // namespace crl::cli
