#pragma once
// Rollout scheduling for RL training over a simulated inference server: how rollouts are launched, how they
// are grouped into training batches, and what each costs in simulated time.
//
// A rollout replays its trace (engine/sim/rollout_trace.h): each call goes to the server, and when the
// answer comes the rollout waits the call's environment time, then sends the next call. A summary call
// blocks its rollout like any other call (the episode cannot continue without the summary). The trainer
// takes `batch_size` finished rollouts per training step; a step lasts train_overhead + tokens x
// train_seconds_per_token (on the trainer's own GPUs: generation and training never share a device here).
// Modes:
//  * kSync: batch j launches rollouts [jB, (j+1)B) (at most `concurrency` in flight), waits for the slowest
//    of them, trains, then starts batch j+1. Fully on-policy; the batch time is the slowest rollout + train.
//  * kAsync (bounded staleness s, as AReaL): rollouts are launched while fewer than `concurrency` are in
//    flight and at most (version + s + 1) x B have been launched; the trainer takes the first B finished
//    rollouts whenever it is idle, so generation and training overlap. A finished rollout whose
//    staleness (trainer version when consumed - version at launch) would exceed s is discarded (counted,
//    its GPU time wasted), so every trained rollout respects the bound.
//  * kPartial (partial rollouts, as Kimi k1.5): `concurrency` rollouts in flight; the batch closes as soon as
//    B rollouts have finished (stragglers do not hold it); during training no rollout sends a new call, and
//    the unfinished ones resume afterwards under the new policy version (they span versions).
// The run ends when `train_steps` steps are done. Everything is event-driven on one EventKernel, so a run is
// a pure function of the traces and the options.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/event_kernel.h"
#include "engine/sim/inference_server.h"
#include "engine/sim/rollout_trace.h"

namespace crl::sim {

enum class SchedulerMode : uint8_t { kSync = 0, kAsync = 1, kPartial = 2 };
const char* scheduler_name(SchedulerMode mode);

struct ScheduleOptions {
  SchedulerMode mode = SchedulerMode::kSync;
  int64_t batch_size = 32;  // rollouts per training step
  int64_t train_steps = 4;
  int64_t concurrency = 32;              // rollouts in flight at most
  int64_t max_staleness = 1;             // kAsync only
  double train_seconds_per_token = 0.0;  // trainer time per token of a trained rollout (train_tokens())
  double train_overhead_seconds = 0.0;   // fixed time per training step
  void validate(const std::string& where) const;
};

// One rollout as it ran.
struct RolloutRecord {
  int64_t index = 0;  // launch order = trace index
  SimTime launched = 0, finished = 0;
  int64_t version_at_launch = 0;
  int64_t consumed_by_step = -1;  // -1: not trained (discarded or still running at the end)
  int64_t staleness = 0;          // consumed_by_step - version_at_launch
  int64_t versions_spanned = 0;   // kPartial: training steps that happened while it ran
  bool discarded = false;
  int calls = 0, turns = 0, compactions = 0;
  double reward = 0.0;
  // Time split (ns): waiting in the server queue, on the server (admitted to answered) for execution and
  // for summary calls, in the environment, paused for training (kPartial).
  SimTime queue_ns = 0, execute_ns = 0, summary_ns = 0, env_ns = 0, paused_ns = 0;
  int preemptions = 0;
  double gpu_seconds = 0.0, summary_gpu_seconds = 0.0;
  int64_t prompt_tokens = 0, cache_hit_tokens = 0, prefill_tokens = 0, output_tokens = 0;
  int64_t summary_tokens = 0;    // prompt tokens computed + output tokens of summary calls
  int64_t reprefill_tokens = 0;  // prompt tokens computed for the first request after each compaction
  SimTime wall_ns() const { return finished - launched; }
};

struct BatchRecord {
  int64_t step = 0;
  SimTime started = 0;         // previous step's end (0 for the first)
  SimTime rollouts_ready = 0;  // the batch's last rollout was taken
  SimTime trained = 0;         // the training step ended
  int64_t train_tokens = 0;
  SimTime wall_ns() const { return trained - started; }
};

struct ScheduleResult {
  std::vector<RolloutRecord> rollouts;  // every launched rollout, in launch order
  std::vector<BatchRecord> batches;
  ServerStats server;
  SimTime end = 0;
  uint64_t events = 0;
  int64_t discarded = 0;
  int64_t max_staleness_seen = 0;
  double train_seconds = 0.0;  // trainer busy time
};

// Runs the schedule: traces(i) gives rollout i's trace (called once per launched rollout, in launch order;
// the reference must stay valid until run_schedule returns).
ScheduleResult run_schedule(const ServerProfile& server, const ScheduleOptions& options,
                            const std::function<const RolloutTrace&(int64_t index)>& traces);

// The longest trained rollouts, longest first (ties: lower index first), at most `count`.
std::vector<const RolloutRecord*> stragglers(const ScheduleResult& result, size_t count);
// One line per straggler: its wall time and why (compactions, turns, queueing, summary time, preemptions).
std::string format_stragglers(const ScheduleResult& result, size_t count);

}  // namespace crl::sim
