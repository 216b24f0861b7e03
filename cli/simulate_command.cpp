// `crl simulate FILE [--out DIR] [--threads N]`: simulates what compaction costs (time, GPU time, tokens) per
// summarizer and setting, from real episodes replayed through a simulated inference server and rollout
// scheduler (scenarios/compaction_cost.h, engine/sim/). `crl run FILE` does the same for such a file.
#include "cli/simulate_command.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "engine/error.h"
#include "scenarios/compaction_cost.h"

namespace crl::cli {

int simulate_file(const std::string& path, std::string out_dir, int threads, const std::string& command,
                  ProgressMode progress_mode) {
  if (threads < 1) throw Error("option --threads", "", "value " + std::to_string(threads) + " must be >= 1");
  const scenarios::CostSpec spec = scenarios::load_compaction_cost(path);
  if (out_dir.empty()) out_dir = "results/" + spec.name;
  scenarios::CostRunOptions options;
  options.threads = threads;
  // Progress in strategies (each replays its traces through the simulated server and scheduler).
  ProgressReporter progress("crl simulate " + spec.name, progress_mode);
  if (progress.enabled()) {
    progress.set_total(static_cast<int64_t>(spec.strategies.size()));
    options.progress = [&](const std::string& strategy, bool done) {
      if (done) {
        progress.advance(1);
      } else {
        progress.set_stage("strategy " + strategy);
      }
    };
  }
  const auto start = std::chrono::steady_clock::now();
  const scenarios::CostResult result = scenarios::run_compaction_cost(spec, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress.finish();
  scenarios::write_cost_results(out_dir, spec, result, command);
  uint64_t events = 0;
  for (const scenarios::StrategyResult& r : result.strategies) {
    events += r.events;
    if (r.strategy->variant != "base") continue;
    std::printf(
        "%s: success %.1f%%, rollout p50 %.3f s, batch p50 %.3f s, %.3f GPU-s/trajectory, summary "
        "tokens %.1f%%\n",
        r.strategy->name.c_str(), 100.0 * r.success, r.rollout_seconds.p50, r.batch_seconds.p50,
        r.gpu_seconds_per_trajectory, 100.0 * r.summary_token_share);
  }
  std::printf(
      "%zu strategies, %lld episodes, %llu simulated events; wrote %s/{report.md,summary.json,"
      "strategies.csv,cost_vs_success.svg} in %.1f s\n",
      result.strategies.size(), static_cast<long long>(result.episodes),
      static_cast<unsigned long long>(events), out_dir.c_str(), seconds);
  return 0;
}

namespace {

int simulate_command(const std::vector<std::string>& args) {
  std::string file, out;
  int threads = 1;
  std::string progress_mode = "auto";
  po::options_description options;
  add_progress_option(options, progress_mode);
  options.add_options()("out", po::value(&out), "results folder (default results/<name>)")(
      "threads", po::value(&threads)->default_value(threads),
      "threads for the episodes that produce the traces (results do not depend on it)")(
      "file", po::value(&file)->required(), "compaction-cost file (protobuf text format)");
  po::positional_options_description positional;
  positional.add("file", 1);
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("simulate", "FILE [--out DIR] [--threads N]", options, positional, args, vm,
                     exit_code)) {
    return exit_code;
  }
  const ProgressMode progress = parse_progress_mode(progress_mode);
  return simulate_file(file, out, threads, report_command("crl simulate", args), progress);
}

const CommandRegistrar kSimulateCommandRegistrar(
    {"simulate", "simulate the time, GPU and token cost of compaction (a compaction-cost file)",
     simulate_command});

}  // namespace
}  // namespace crl::cli
