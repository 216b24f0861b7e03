#pragma once
// The compaction-cost study (issue 9): what compaction costs in time, GPU time and tokens, per summarizer and
// per setting, by discrete-event simulation.
//
// How a strategy is measured:
//  1. Traces. Real episodes produce every call's token counts: the environment (coding_repo by default),
//     the context manager with the strategy's budget, a scripted executor (coding_repo_solver), and a
//     stubbed summarizer around it: `oracle` keeps the executor's whole summary; `frozen` and `learned`
//     keep each line of it with probability keep_rate (a lost line is a lost fact: the executor redoes
//     work, needs more turns and compactions, or fails); `none` runs without compaction in one large
//     context. Each call records its prompt size, the prefix it shares with the rollout's previous sequence
//     (an extended history shares everything, a rebuilt one only its system prompt), and its output size.
//  2. Simulation. The traces are replayed through a rollout scheduler (engine/sim/rollout_scheduler.h) over
//     a simulated inference server (engine/sim/inference_server.h): queueing, batching, prefix cache,
//     preemption, environment time, training steps.
//  3. Metrics over the trained rollouts: success, wall-clock per rollout and per batch (p50/p99),
//     GPU-seconds per trajectory, the share of tokens spent on summaries and on re-prefill after a
//     compaction, the prefix-cache hit rate, and the stragglers.
// The learned and frozen summarizers' keep rates are given, or measured on a trained policy's own summaries
// (the recall of the needed facts per compaction, scenarios/compaction_cost_retention.h), read from a `crl
// run` results folder or from a scenario trained now; the report separates inference time from trainer time
// in every learned-vs-frozen statement. Everything is a pure function of the file and its seed: the same file
// gives the same report bytes.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/budget.h"
#include "engine/sim/inference_server.h"
#include "engine/sim/rollout_scheduler.h"

namespace crl::scenarios {

enum class SummarizerKind { kOracle, kFrozen, kLearned, kNone };
const char* summarizer_kind_name(SummarizerKind kind);

struct SummarizerSpec {
  std::string name;
  SummarizerKind kind = SummarizerKind::kOracle;
  double keep_rate = 1.0;        // resolved (given, or read from the trained scenario)
  std::string keep_rate_source;  // how keep_rate was obtained, for the report
  // keep_rate measured as the retention of arm trained_arm (scenarios/compaction_cost_retention.h), read at
  // run time from one of these (non-empty):
  std::string trained_scenario;   // a training scenario, trained now
  std::string retention_results;  // a `crl run` results folder (its summary.json)
  std::string trained_arm;
  std::string source_where;  // "file:line:column" of the source field, for errors at run time
  int64_t capacity = 0;      // kNone: the large context
};

// One measured configuration: a summarizer with the base setup or one swept field changed.
struct CostStrategy {
  std::string name;         // "learned", "learned reserve=512", "oracle scheduler=async", ...
  std::string summarizer;   // SummarizerSpec::name
  std::string variant;      // "base" or "FIELD=VALUE"
  std::string sweep_field;  // "" for base
  Budget budget;
  sim::ScheduleOptions schedule;
  sim::ServerProfile server;
};

struct CostSpec {
  std::string path;
  std::string name;
  std::string description;
  uint64_t seed = 1;
  std::string env;
  std::map<std::string, std::string> env_params;
  std::string executor;
  std::string view;
  int64_t tasks = 32;
  int64_t env_step_ns = 0;
  sim::ServerProfile server;
  std::vector<SummarizerSpec> summarizers;
  std::vector<CostStrategy> strategies;  // the base of every summarizer first, then the sweeps
  int stragglers = 5;
};

// Parses and checks a compaction-cost file; errors name "file:line:column", the field path and the value.
CostSpec parse_compaction_cost(const std::string& text, const std::string& path);
CostSpec load_compaction_cost(const std::string& path);
// Whether `text` is a compaction-cost file rather than a training scenario: it parses as one with a
// summarizer, or (with an error in it) a line starts a top-level `summarizer {` block.
bool is_compaction_cost(const std::string& text);

struct Quantiles {
  double p50 = 0.0, p99 = 0.0, mean = 0.0, max = 0.0;
};

struct StrategyResult {
  const CostStrategy* strategy = nullptr;
  int64_t trained_rollouts = 0;
  int64_t launched_rollouts = 0;
  int64_t discarded_rollouts = 0;
  double success = 0.0;                   // mean reward of the trained rollouts
  double compactions = 0.0, turns = 0.0;  // means per trained rollout
  Quantiles rollout_seconds, batch_seconds;
  // Each batch's wall time split at the moment its last rollout was ready: waiting for the inference server
  // (rollouts) and the trainer's step; means over the batches (inference + trainer = batch_seconds.mean).
  double batch_inference_seconds = 0.0, batch_trainer_seconds = 0.0;
  double gpu_seconds_per_trajectory = 0.0;  // generation: the server's GPU time of the trained rollouts
  double seconds_per_success = 0.0;  // all batches' wall-clock / successful trained rollouts (inf: none)
  double train_gpu_seconds_per_step = 0.0;       // trainer time per training step
  double generation_gpu_seconds_per_step = 0.0;  // server busy time per training step (all rollouts)
  double summary_token_share = 0.0;              // summary calls' computed + generated tokens / all of them
  double reprefill_token_share = 0.0;            // prompt tokens computed right after a compaction / all
  double cache_hit_rate = 0.0;                   // prompt tokens served from the prefix cache / prompt tokens
  double summary_seconds = 0.0;                  // mean per trained rollout: time blocked on summary calls
  double summary_time_share = 0.0;               // of the trained rollouts' wall time
  double queue_time_share = 0.0;
  int64_t preemptions = 0;
  int64_t max_staleness = 0;
  double simulated_seconds = 0.0;  // end of the run
  uint64_t events = 0;
  std::string stragglers;  // format_stragglers()
};

struct CostResult {
  std::string name;
  std::vector<SummarizerSpec> summarizers;  // keep rates resolved
  std::vector<StrategyResult> strategies;   // parallel to CostSpec::strategies
  int64_t episodes = 0;                     // real episodes run to produce traces
};

struct CostRunOptions {
  int threads = 1;  // episodes for traces run in parallel; results do not depend on it
  // Progress (may be empty; cannot change a result): called before (done = false) and after (done = true)
  // each strategy is simulated, on the calling thread.
  std::function<void(const std::string& strategy, bool done)> progress;
};

CostResult run_compaction_cost(const CostSpec& spec, const CostRunOptions& options = {});

std::string format_cost_report(const CostSpec& spec, const CostResult& result, const std::string& command);
std::string format_cost_json(const CostResult& result);
std::string format_cost_csv(const CostResult& result);
std::string format_cost_svg(const CostResult& result);
// Writes report.md, summary.json, strategies.csv and cost_vs_success.svg into `dir`, each atomically.
void write_cost_results(const std::string& dir, const CostSpec& spec, const CostResult& result,
                        const std::string& command);

}  // namespace crl::scenarios
