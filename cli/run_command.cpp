// `crl run`: runs episodes of an environment with a policy and reports them.
//  * `crl run SCENARIO --out DIR [--threads N] [--seeds 7,17] [--arms A,B] [--resume]`: trains and evaluates
//    every arm of a scenario file (or the arms --arms names, scenarios::select_arms) over its seeds and
//    writes summary.json, curves.csv, curves.svg and report.md into DIR as one set (scenarios/output_set.h),
//    and checkpoints under DIR/checkpoints (scenarios/checkpoint.h) every training.checkpoint_every episodes
//    and at the end. --resume continues every (arm, seed) from its newest checkpoint; the outputs are the
//    bytes of an uninterrupted run (the report shows the command without
//    --resume). Temporaries that killed runs left in DIR are removed. A progress line goes to stderr when it
//    is a terminal (--progress auto|always|never, cli/progress.h); otherwise the command is quiet apart
//    from a short result on stdout.
//  * `crl run SCENARIO --shard I/N --out DIR/shard-I`: runs the jobs i (= arm index x seeds + seed index)
//    with i mod N == I and writes a shard folder (scenarios/shard.h); `crl merge DIR/shard-* --out DIR` then
//    writes the result set of the single-process run, byte for byte.
//  * Without a scenario: the built-in demo, one memory-chain episode in the text view played by the
//    memory-chain oracle, with its compactions printed as a readable trace.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/command.h"
#include "cli/episode_options.h"
#include "cli/progress.h"
#include "cli/simulate_command.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/runner.h"
#include "engine/sha256.h"
#include "engine/trace.h"
#include "engine/trajectory_io.h"
#include "envs/registry.h"
#include "policies/rollout.h"
#include "scenarios/compaction_cost.h"
#include "scenarios/output_set.h"
#include "scenarios/report.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"
#include "scenarios/shard.h"

namespace crl::cli {
namespace {

// "a,b c" -> {a, b, c}: the items of a list option given as one or several comma-separated words.
std::vector<std::string> list_items(const std::vector<std::string>& words) {
  std::vector<std::string> items;
  for (const std::string& word : words) {
    std::string token;
    std::stringstream list(word);
    while (std::getline(list, token, ',')) {
      if (!token.empty()) items.push_back(token);
    }
  }
  return items;
}

// "7,17 29" -> {7, 17, 29}; throws crl::Error naming the option for anything else.
std::vector<uint64_t> parse_seeds(const std::vector<std::string>& words) {
  std::vector<uint64_t> seeds;
  for (const std::string& token : list_items(words)) {
    size_t used = 0;
    uint64_t seed = 0;
    try {
      seed = std::stoull(token, &used);
    } catch (...) {
      used = 0;
    }
    if (used != token.size() || token[0] == '-') {
      throw Error("option --seeds", "", "value " + quote(token) + " is not a non-negative integer");
    }
    // A seed twice would be one run counted twice in the means and intervals over seeds.
    if (std::find(seeds.begin(), seeds.end(), seed) != seeds.end()) {
      throw Error("option --seeds", "", "seed " + token + " is given twice; each seed runs once");
    }
    seeds.push_back(seed);
  }
  return seeds;
}

// `crl run SCENARIO --shard I/N --out DIR`: runs the shard's jobs and writes the shard folder
// (scenarios/shard.h); `crl merge` turns the shard folders into the result set.
int run_shard_command(const std::string& path, const std::string& text, const std::string& out_dir,
                      const std::string& shard_text, const scenarios::ScenarioSpec& spec,
                      scenarios::RunOptions options, const std::vector<std::string>& args) {
  const scenarios::ShardId shard = scenarios::parse_shard(shard_text);
  const std::vector<uint64_t> seeds = options.seeds.empty() ? spec.seeds : options.seeds;
  const std::vector<uint32_t> mine = scenarios::shard_jobs(shard, spec.arms.size() * seeds.size());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<scenarios::JobResult> jobs =
      scenarios::run_jobs(spec, options, [&](size_t job) { return job % shard.count == shard.index; });
  // The merged report names the single-process command: without --shard, --threads and --resume.
  scenarios::ShardCommand command;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--resume" || arg.rfind("--threads=", 0) == 0 || arg.rfind("--shard=", 0) == 0 ||
        arg.rfind("--progress=", 0) == 0)
      continue;
    if (arg == "--threads" || arg == "--shard" || arg == "--progress") {
      ++i;
      continue;
    }
    if (arg.rfind("--out=", 0) == 0) command.out_arg = static_cast<int>(command.args.size());
    if (arg == "--out" && i + 1 < args.size()) {
      command.args.push_back(arg);
      command.out_arg = static_cast<int>(command.args.size());
      command.args.push_back(args[++i]);
      continue;
    }
    command.args.push_back(arg);
  }
  scenarios::write_shard(out_dir, path, text, spec, seeds, shard, jobs, command);
  scenarios::remove_stale_temporaries(out_dir);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("shard %u/%u: %zu of %zu jobs, wrote %s in %.1f s\n", shard.index, shard.count, mine.size(),
              spec.arms.size() * seeds.size(), out_dir.c_str(), seconds);
  return 0;
}

int run_scenario_command(const std::string& path, std::string out_dir, int threads,
                         const std::vector<std::string>& seed_items,
                         const std::vector<std::string>& arm_items, bool resume, const std::string& shard,
                         ProgressMode progress_mode, const std::vector<std::string>& args) {
  if (threads < 1) throw Error("option --threads", "", "value " + std::to_string(threads) + " must be >= 1");
  const std::string text = read_file(path);
  // A compaction-cost file (proto/compaction_cost.proto) is simulated, not trained: `crl simulate`.
  if (scenarios::is_compaction_cost(text)) {
    if (!shard.empty()) throw Error("option --shard", "", "applies to training scenarios, not to " + path);
    return simulate_file(path, out_dir, threads, report_command("crl run", args), progress_mode);
  }
  scenarios::ScenarioSpec spec = scenarios::parse_scenario(text, path);
  if (!arm_items.empty()) spec = scenarios::select_arms(spec, list_items(arm_items), "option --arms");
  scenarios::RunOptions options;
  options.threads = threads;
  options.seeds = parse_seeds(seed_items);
  // A shard folder is named by the batch system's script (DIR/shard-I): no default.
  if (!shard.empty() && out_dir.empty()) {
    throw Error("option --shard", "", "needs --out (crl run SCENARIO --shard I/N --out DIR/shard-I)");
  }
  if (out_dir.empty()) out_dir = "results/" + spec.name;
  options.checkpoint_dir = out_dir;
  options.resume = resume;
  scenarios::remove_stale_temporaries(out_dir);

  // Progress in episodes (training and evaluation) over every arm and seed (cli/progress.h).
  ProgressReporter progress("crl run " + spec.name, progress_mode);
  if (progress.enabled()) {
    std::function<bool(size_t)> select;
    if (!shard.empty()) {
      const scenarios::ShardId id = scenarios::parse_shard(shard);
      select = [id](size_t job) { return job % id.count == id.index; };
    }
    progress.set_total(scenarios::planned_episodes(spec, options, select));
    options.stage = [&](const std::string& arm, uint64_t seed) {
      progress.set_stage("arm " + arm + ", seed " + std::to_string(seed));
    };
    options.episodes_done = [&](int64_t n) { progress.advance(n); };
  }
  if (!shard.empty()) return run_shard_command(path, text, out_dir, shard, spec, options, args);
  const auto start = std::chrono::steady_clock::now();
  const scenarios::ScenarioResult result = scenarios::run_scenario(spec, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress.finish();

  // The report names the command without the options that cannot change the results (--resume, --threads,
  // --progress), so that a resumed run, with any thread count, writes the bytes of an uninterrupted one.
  const std::string command = report_command("crl run", args, {"--threads"}, {"--resume"});
  scenarios::write_results(out_dir, spec, result, command);
  // The run's wall time and threads: the one output that differs run to run, so it stays out of report.md
  // (which says where to find it) and out of the result set.
  char runtime[256];
  std::snprintf(runtime, sizeof(runtime), "wall_seconds %.1f\nthreads %d\nresumed %s\n", seconds, threads,
                resume ? "true" : "false");
  write_file_atomic((std::filesystem::path(out_dir) / "runtime.txt").string(), runtime);
  scenarios::remove_stale_temporaries(out_dir);

  const std::vector<scenarios::GateResult> gates = scenarios::evaluate_gates(spec, result);
  for (const scenarios::ArmResult& arm : result.arms) {
    std::printf("%s: mean accuracy %.2f%%\n", arm.name.c_str(), 100.0 * arm.mean_accuracy);
  }
  if (!gates.empty()) std::printf("gates: %s\n", scenarios::gates_verdict(gates).c_str());
  std::printf("wrote %s/{summary.json,curves.csv,curves.svg,report.md,runtime.txt} in %.1f s\n",
              out_dir.c_str(), seconds);
  return 0;
}

int run_command(const std::vector<std::string>& args) {
  // The demo's budget is the environment's default for the view (for the memory chain's text view: every
  // compaction comes from the chain's reset points, envs/memory_chain), unless options replace it.
  EpisodeOptions episode;
  std::string policy_name = "memory_chain_oracle";
  std::string scenario, out_path, shard;
  std::vector<std::string> seeds, arms;
  int episodes = 1, threads = 1;
  bool trace = true, full = false, resume = false;
  std::string progress_mode = "auto";
  po::options_description options;
  episode.add_to(options);
  add_progress_option(options, progress_mode);
  options.add_options()("policy", po::value(&policy_name)->default_value(policy_name), "policy name")(
      "episodes", po::value(&episodes)->default_value(episodes), "number of episodes")(
      "threads", po::value(&threads)->default_value(threads), "worker threads (results do not depend on it)")(
      "out", po::value(&out_path),
      "with a scenario: the results folder (default results/<scenario name>); without: write the demo's "
      "trajectories here (.jsonl, or binary protobuf otherwise)")(
      "seeds", po::value(&seeds)->multitoken()->composing(),
      "with a scenario: run these seeds instead (7,17,29)")(
      "arms", po::value(&arms)->multitoken()->composing(),
      "with a scenario: run only these arms (joint,frozen; each arm's results are those of the whole run)")(
      "trace", po::value(&trace)->default_value(trace), "print the first episode as a readable trace")(
      "full", po::bool_switch(&full), "print every run of tokens in the trace")(
      "resume", po::bool_switch(&resume),
      "with a scenario: continue every arm and seed from its newest checkpoint in --out")(
      "shard", po::value(&shard),
      "with a scenario: run shard I/N of its (arm, seed) jobs (job i when i mod N == I) into --out; "
      "crl merge assembles the shards")("scenario", po::value(&scenario),
                                        "scenario file (protobuf text format)");
  po::positional_options_description positional;
  positional.add("scenario", 1);
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("run",
                     "[SCENARIO --out DIR [--threads N] [--seeds 7,17,29] [--arms A,B] [--resume] [--shard "
                     "I/N]] [options]",
                     options, positional, args, vm, exit_code))
    return exit_code;
  const ProgressMode progress = parse_progress_mode(progress_mode);
  if (!scenario.empty())
    return run_scenario_command(scenario, out_path, threads, seeds, arms, resume, shard, progress, args);
  if (!shard.empty())
    throw Error("option --shard", "", "needs a scenario file (crl run SCENARIO --shard I/N --out DIR)");
  if (resume)
    throw Error("option --resume", "", "needs a scenario file (crl run SCENARIO --out DIR --resume)");
  if (!arms.empty())
    throw Error("option --arms", "", "needs a scenario file (crl run SCENARIO --arms A,B --out DIR)");
  if (episodes < 1)
    throw Error("option --episodes", "", "value " + std::to_string(episodes) + " must be >= 1");
  if (threads < 1) throw Error("option --threads", "", "value " + std::to_string(threads) + " must be >= 1");

  const auto params = episode.param_map();
  const auto prototype = make_env(episode.env, params, "option --env/--param");
  const Budget budget = episode.budget_for(prototype->spec(), vm);
  // Episode i plays task i: more episodes than the environment has tasks would alias tasks silently.
  if (const auto list = prototype->task_list(); list && static_cast<uint64_t>(episodes) > list->size) {
    throw Error("option --episodes", "",
                "value " + std::to_string(episodes) + " is more than the tasks of " + list->name + " (" +
                    std::to_string(list->size) + "): episode i plays task i");
  }
  const auto codec = make_codec(episode.view, prototype->spec());
  const auto policy =
      make_policy(policy_name, {}, PolicyTarget{&prototype->spec(), codec}, "option --policy");
  const auto make_config = [&](size_t i) {
    EpisodeConfig config;
    config.budget = budget;
    config.seed = episode.seed;
    config.sample_index = static_cast<int64_t>(i);
    return config;
  };
  {  // the budget must fit the first prompt (the first episode's; the check does not consume a stream)
    Episode probe(make_env(episode.env, params), codec, make_config(0));
    probe.start(Task{"demo-0", 0, ""});
    if (const int code = check_budget_fits(probe, "run")) return code;
  }

  RolloutSpec spec;
  spec.count = static_cast<size_t>(episodes);
  spec.make_episode = [&](size_t i) {
    auto run = std::make_unique<Episode>(make_env(episode.env, params), codec, make_config(i));
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

const CommandRegistrar kRunCommandRegistrar(
    {"run", "train and evaluate a scenario's arms (without a scenario: the compaction demo)", run_command});

}  // namespace
}  // namespace crl::cli
