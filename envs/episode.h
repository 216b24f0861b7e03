#pragma once
// One episode as a state machine: an environment wrapped in a budgeted context with compaction, recording
// a trajectory (spec sections 1.1 and 1.2).
//
// The episode never calls a policy. It exposes the pending Request (execute or summarize) and takes the
// answer through submit(). The same object therefore serves a local policy (policies/rollout.h drives many
// episodes in lockstep, one batched policy call per round) and an external trainer that samples with its
// own LLM (the server's step mode).
//
// Before each execution request: if C - |h| < T_comp (or the environment asked for a reset) and the window
// holds an action, the next request is a summary of history + q_sum; the answer closes a summary segment and
// the context is rebuilt as system + resume(summary) + newest k steps (k = 2 -> 1 -> 0 until it fits).
// Endings: the environment terminates (completed) or truncates (truncated); compaction budget exhausted,
// no room left, or a rebuild that does not fit (truncated); first prompt >= C or a failed policy call
// (failed); an aborted generation (aborted). The reward is the sum of the environment's rewards.
#include <memory>
#include <optional>
#include <string>

#include "engine/budget.h"
#include "engine/context.h"
#include "engine/state_hasher.h"
#include "engine/trajectory.h"
#include "engine/turn.h"
#include "envs/codec.h"
#include "envs/env.h"

namespace crl {

// Whether a budget can run an episode, checked against its real first prompt (after Episode::start): the
// first turn at the per-turn cap and its summary request (history + instruction, the turn's observation cut
// down to the truncation marker) must fit C - summary_cap, and a rebuild after a summary of summary_cap
// tokens (system + resume(summary), k = 0) must stay below C - T_comp. Otherwise the episode could only end
// `truncated` at its first compaction ("the summary request does not fit").
struct BudgetFit {
  bool fits = true;
  int64_t min_capacity = 0;  // the smallest C that fits, the other budget numbers unchanged
  std::string detail;        // the numbers, for an error message ("" when it fits)
};

struct EpisodeConfig {
  Budget budget;
  uint64_t seed = 0;  // run seed
  int64_t group_index = 0;
  int64_t sample_index = 0;
  std::string rollout_id;  // default: "<env>/<task id>/<seed>/<sample index>"
};

class Episode {
 public:
  Episode(std::unique_ptr<Env> env, std::shared_ptr<const Codec> codec, EpisodeConfig config);
  // Requests point into the episode's own context: an episode never moves (hold it by unique_ptr).
  Episode(const Episode&) = delete;
  Episode& operator=(const Episode&) = delete;

  // Resets the environment for `task` and prepares the first request. The episode may end at once (a first
  // prompt that does not fit).
  void start(const Task& task);

  bool done() const { return done_; }
  // The pending request; only valid while !done().
  const Request& request() const { return request_; }
  // Applies the answer to request(). Throws crl::Error (field "tokens", "logprobs" or "values") when the
  // decision is malformed (more tokens than max_new_tokens, lengths that differ); nothing is applied then.
  void submit(const Decision& decision);
  // The environment step that submit(decision) would make, so that a driver can announce the steps of a
  // whole round to batching environments first (envs/env.h prepare_steps, policies/rollout.cpp). nullopt
  // when the environment has no StepBatcher or submit() would not step it (a summary; a failed, aborted or
  // malformed decision). Changes nothing.
  std::optional<PendingStep> pending_step(const Decision& decision) const;

  // The finished trajectory (call once, after done()).
  Trajectory finish();

  // A running hash (32 hex digits) of everything applied so far: same inputs in the same order give the same
  // hashes.
  std::string state_hash() const;
  int turn() const { return turn_; }
  double reward() const { return reward_; }
  EpisodeStatus status() const { return status_; }
  const std::string& reason() const { return reason_; }
  const Context& context() const { return context_; }
  const Codec& codec() const { return *codec_; }
  const Env& env() const { return *env_; }
  const Task& task() const { return task_; }
  const EpisodeConfig& config() const { return config_; }
  // Stream key of the environment's randomness, for reproducible re-creation.
  StreamKey env_stream() const;
  // The budget check above, for this episode's first prompt (valid after start()).
  BudgetFit budget_fit() const;

 private:
  void prepare_next();
  void end(EpisodeStatus status, std::string reason);
  StreamKey stream(Role role, uint64_t ordinal) const;

  std::unique_ptr<Env> env_;
  std::shared_ptr<const Codec> codec_;
  EpisodeConfig config_;
  Context context_;
  Recorder recorder_;
  Task task_;
  uint64_t task_key_ = 0;
  Request request_;
  int turn_ = 0;
  int actions_in_window_ = 0;
  double reward_ = 0.0;
  bool done_ = true;
  EpisodeStatus status_ = EpisodeStatus::kCompleted;
  std::string reason_;
  std::vector<std::string> weight_versions_;                 // distinct, in order of first use
  int64_t first_system_tokens_ = 0, first_user_tokens_ = 0;  // of the first prompt, for budget_fit()
  StateHasher running_hash_;
  bool finished_ = false;
};

// The stream-key task component of a task id (the first 8 bytes of SHA-256("task|" + id)).
uint64_t task_stream_id(const std::string& task_id);

}  // namespace crl
