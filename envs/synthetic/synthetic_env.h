#pragma once
// The console environment `synthetic` (spec section 4). Each turn the assistant sends exactly one line:
//   next             -> the next record; after the last one: "END" and the question
//   submit <answer>  -> the exact verifier decides R (1 or 0) and the episode ends
// Anything else is an invalid command: it is counted, answered with an ERROR line, and the episode ends
// (truncated, R = 0) at the invalid-command limit; so does reaching the turn limit without a submit.
//
// The tasks come from the committed split files (source=files, checked against the folder's manifest) or
// from the same generator on the fly (source=generate, the default: no file access, identical tasks).
// Task sets are immutable and shared by every env of the process; the per-episode state is this object.
// reset(): a Task whose id starts with "syn-" must name a task of the split; with any other id (a driver's
// label) the task is the index-th of the split: an index past its end is a crl::Error naming the split and
// its size, unless Task::cycle asks for index modulo the size.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "envs/env.h"
#include "envs/synthetic/metrics.h"
#include "envs/synthetic/task.h"

namespace crl::envs::synthetic {

enum class View { kText, kSymbolic, kBoth };

// What a step returns beyond the task's own text, built once with its TaskSet so a step only copies it: the
// END observation and the symbolic renderings.
struct TaskViews {
  std::string end_text;  // "END\n" + the question
  std::vector<TokenId> user;
  std::vector<std::vector<TokenId>> records;
  std::vector<TokenId> end;
};

// The tasks of one split, shared read-only between envs.
struct TaskSet {
  std::vector<SyntheticTask> tasks;
  std::vector<TaskViews> views;  // parallel to tasks
  std::map<std::string, int> by_id;
};
// Loads (or generates) a split once per process; later calls with the same arguments share the result.
std::shared_ptr<const TaskSet> shared_task_set(const std::string& source, const std::string& dir,
                                               const std::string& name_space, const std::string& split);

// The registered spec (the 16-record namespaces). The hard namespace's spec differs in its vocabulary (48
// records) and its default budgets; an env returns the spec of its namespace.
const EnvSpec& synthetic_env_spec();
const EnvSpec& synthetic_env_spec(std::string_view name_space);
// The hard namespace's default symbolic budget: C = 64, T_comp = 16, tail 2, per-turn cap 4, summary cap 4,
// at most 16 compactions. Measured with the oracle (tests/envs/synthetic_hard_test.cpp): every dev episode
// compacts at least 6 times.
inline constexpr int64_t kHardCapacity = 64;
inline constexpr int64_t kHardReserve = 16;
inline constexpr int64_t kHardSummaryCap = 4;
inline constexpr int kHardMaxCompactions = 16;
Budget hard_symbolic_budget();
extern const char* const kSystemPrompt;

class SyntheticEnv final : public Env {
 public:
  explicit SyntheticEnv(const Params& params);
  const EnvSpec& spec() const override { return *spec_; }

  // The task source of this env and the episode's task (valid after reset()).
  const TaskSet& tasks() const { return *tasks_; }
  const SyntheticTask& task() const { return *task_; }
  // Records shown so far: what a summary written now could know (for the summary metrics).
  int records_seen() const { return records_seen_; }
  View view() const { return view_; }
  std::optional<TaskList> task_list() const override;
  bool has_task(const std::string& id) const override;
  EpisodeMetrics episode_metrics() const;
  // Symbolic view: the resume body is symbolic_resume(task, records_seen, summary) (symbolic.h): kept
  // records copied as observed, [rec:<i>, UNSEEN] for a record not shown yet. False in the text view.
  bool symbolic_resume_body(std::span<const TokenId> summary, std::vector<TokenId>& out) const override;

 protected:
  Start do_reset(const Task& task, Rng& rng) override;
  StepResult do_step(const Action& action) override;

 private:
  enum class Command { kNext, kSubmit, kInvalid };
  Command parse(const Action& action, std::string& answer) const;
  void set_observation(Observation& out, const std::string& text, const std::vector<TokenId>& symbols) const;

  std::shared_ptr<const TaskSet> tasks_;
  const EnvSpec* spec_ = nullptr;  // synthetic_env_spec(namespace)
  std::string split_, name_space_;
  View view_ = View::kText;
  int turn_limit_ = 64;
  int invalid_limit_ = 8;

  const SyntheticTask* task_ = nullptr;
  const TaskViews* views_ = nullptr;
  int records_seen_ = 0;
  int turns_ = 0;
  int invalid_commands_ = 0;
  bool submitted_ = false;
  bool correct_ = false;
  bool truncated_ = false;
};

}  // namespace crl::envs::synthetic
