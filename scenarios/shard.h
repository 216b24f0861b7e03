#pragma once
// Sharded sweeps (issue 19 item 3): `crl run SCENARIO --shard I/N --out DIR/shard-I` runs a deterministic
// 1/N of the scenario's (arm, seed) jobs, and `crl merge DIR/shard-* --out DIR` writes the result set of a
// single-process `crl run SCENARIO --out DIR`, byte for byte.
//
// Assignment: job i (= arm index x seeds + seed index, scenarios/runner.h) belongs to shard i mod N. Shards
// beyond the job count are empty: they still write a manifest, with no jobs, and the merge expects them.
//
// A shard folder (written as one set, scenarios/output_set.h, so an interrupted shard leaves INCOMPLETE):
//   shard.manifest     proto/shard.proto ShardManifest in text format: the scenario's path, SHA-256 and
//                      text, its seeds, its arms, I, N, the job count, the job list, the command the merged
//                      report names
//   job-<i>.pb         one binary JobRecord per job of the shard (everything the report needs of that run)
//   checkpoints/       the shard's checkpoints (so `--resume` works per shard)
//
// The merge refuses, naming the folder and the job: a folder with the INCOMPLETE marker or without a
// manifest, shards of another scenario (other bytes), another N, other seeds or other arms (--arms), a shard
// given twice, a missing shard (it names the jobs that are missing), a job list that is not the shard's, a
// missing or foreign job record. It then assembles the result through scenarios::assemble_result() and writes
// it with write_results(), the code a single-process run uses, so equal job results give equal bytes by
// construction.
//
// The report's "Produced by" line of a merged run is the single-process command: the shard's command line
// without --shard (and without --threads/--resume, as for any run) with the --out value replaced by the
// merge's --out folder. `crl run S --shard 0/4 --out D/shard-0` merged into D reads `crl run S --out D`,
// the line of `crl run S --out D`.
#include <cstdint>
#include <string>
#include <vector>

#include "scenarios/runner.h"
#include "scenarios/scenario.h"

namespace crl::scenarios {

inline constexpr const char* kShardManifest = "shard.manifest";

struct ShardId {
  uint32_t index = 0;
  uint32_t count = 1;
};

// "I/N" with 0 <= I < N; throws crl::Error naming the option --shard otherwise.
ShardId parse_shard(const std::string& text);
// The job indices of a shard (ascending) among `job_count` jobs.
std::vector<uint32_t> shard_jobs(ShardId shard, size_t job_count);

// The single-process command of a shard run: the pieces of its command line and which one holds the --out
// value (-1: none; an index of an "--out=..." piece: the value after '=').
struct ShardCommand {
  std::vector<std::string> args;  // without --shard, --threads, --resume
  int out_arg = -1;
  std::string with_out(const std::string& out_dir) const;  // "crl run ..." with the --out value replaced
};

// Writes a shard folder (the layout above) for the jobs it ran.
void write_shard(const std::string& dir, const std::string& scenario_path, const std::string& scenario_text,
                 const ScenarioSpec& spec, const std::vector<uint64_t>& seeds, ShardId shard,
                 const std::vector<JobResult>& jobs, const ShardCommand& command);

struct MergedRun {
  ScenarioSpec spec;
  ScenarioResult result;
  std::string command;  // for the report
};
// Reads and checks the shard folders (the checks above; throws crl::Error) and assembles the result.
MergedRun merge_shards(const std::vector<std::string>& dirs, const std::string& out_dir);

}  // namespace crl::scenarios
