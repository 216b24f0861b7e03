// `crl merge DIR/shard-* --out DIR`: assembles the shard folders of a sharded sweep (`crl run SCENARIO
// --shard I/N --out DIR/shard-I`, scenarios/shard.h) into summary.json, curves.csv, curves.svg and report.md,
// the bytes a single-process `crl run SCENARIO --out DIR` writes. Refuses missing, duplicate, foreign and
// interrupted shards with an error naming the folder and the job.
#include <cstdio>

#include "cli/command.h"
#include "cli/options.h"
#include "engine/error.h"
#include "scenarios/output_set.h"
#include "scenarios/report.h"
#include "scenarios/shard.h"

namespace crl::cli {
namespace {

int merge_command(const std::vector<std::string>& args) {
  std::vector<std::string> shards;
  std::string out_dir;
  po::options_description options;
  options.add_options()("out", po::value(&out_dir), "the results folder (required)")(
      "shards", po::value(&shards)->multitoken(), "shard folders written by crl run SCENARIO --shard I/N");
  po::positional_options_description positional;
  positional.add("shards", -1);
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("merge", "SHARD_DIR... --out DIR", options, positional, args, vm, exit_code)) {
    return exit_code;
  }
  if (out_dir.empty()) throw Error("option --out", "", "is required (crl merge DIR/shard-* --out DIR)");
  const scenarios::MergedRun merged = scenarios::merge_shards(shards, out_dir);
  scenarios::remove_stale_temporaries(out_dir);
  scenarios::write_results(out_dir, merged.spec, merged.result, merged.command);
  for (const scenarios::ArmResult& arm : merged.result.arms) {
    std::printf("%s: mean accuracy %.2f%%\n", arm.name.c_str(), 100.0 * arm.mean_accuracy);
  }
  const std::vector<scenarios::GateResult> gates = scenarios::evaluate_gates(merged.spec, merged.result);
  if (!gates.empty()) std::printf("gates: %s\n", scenarios::gates_verdict(gates).c_str());
  std::printf("merged %zu shards into %s/{summary.json,curves.csv,curves.svg,report.md}\n", shards.size(),
              out_dir.c_str());
  return 0;
}

const CommandRegistrar kMergeCommandRegistrar(
    {"merge", "merge the shard folders of crl run --shard I/N into one result set", merge_command});

}  // namespace
}  // namespace crl::cli
