#pragma once
// Metrics of the synthetic suite (spec section 4): per-episode exact match, invalid commands, truncations
// and compactions, and per-summary milestone recall, invention, repetition and length.
//
// A summary is reduced to its *mentions*: the values of the task's answer domain it names, in order (text
// view: every 4-digit number for early_fact, every update word for latest_update, every plan word for
// ordered_plan, matched as whole alphanumeric words, case-insensitively; symbolic view: the value of each
// kept record, keep:<i>, or a val: token, that lies in that domain). Both views then share one rule:
//  * the milestones *observed* are those an answer given now would need: the FACT code, the latest observed
//    value of the tracked key, the MILESTONE steps seen so far;
//  * a mention of an observed milestone is a recall the first time and a repetition after that;
//  * a mention of an earlier value of the tracked key (latest_update) is "superseded": neither;
//  * any other mention is an invention: a future milestone, a distractor, a value never shown.
// Phase 7's plan-token F1: recall = recalled / observed; precision = recalled / (mentions - superseded).
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/token.h"
#include "engine/trajectory.h"
#include "envs/codec.h"
#include "envs/synthetic/task.h"

namespace crl::envs::synthetic {

struct SummaryMetrics {
  int observed_milestones = 0;
  int recalled = 0;  // distinct observed milestones named
  int mentions = 0;  // answer-domain values named, repeats included
  int invented = 0;
  int repeated = 0;
  int superseded = 0;
  int length = 0;  // whitespace-separated words (text) or symbols up to and including STOP (symbolic)

  double recall() const {
    return observed_milestones == 0 ? 1.0 : static_cast<double>(recalled) / observed_milestones;
  }
  double invention_rate() const { return mentions == 0 ? 0.0 : static_cast<double>(invented) / mentions; }
  double precision() const;
  double f1() const;
};

// The 0-based indices of the milestones an answer given after `records_seen` records would need.
std::vector<int> observed_milestones(const SyntheticTask& task, int records_seen);

// `records_seen`: how many records the episode had shown when the summary was written (SyntheticEnv::
// records_seen()). The caller may replace `length` with its tokenizer's count.
SummaryMetrics summary_metrics_text(const SyntheticTask& task, int records_seen, std::string_view summary);
SummaryMetrics summary_metrics_symbols(const SyntheticTask& task, int records_seen,
                                       std::span<const TokenId> summary);

struct EpisodeMetrics {
  std::string task_id;
  TaskType type = TaskType::kEarlyFact;
  bool submitted = false;
  bool exact_match = false;
  bool truncated = false;  // by the env's limits; the episode ORs in its own endings (budget exhausted, ...)
  int turns = 0;
  int invalid_commands = 0;
  int records_seen = 0;
  int compactions = 0;  // filled in by the episode, which owns the context
  std::vector<SummaryMetrics> summaries;
};

// The metrics of a finished symbolic-view episode read off its trajectory, for drivers that keep only
// trajectories (the scenario runner): exact match = reward > 0, truncated = the episode did not complete,
// compactions from the trajectory, and one SummaryMetrics per summary segment, with records_seen = 1 + the
// newest observed record [rec:<i>, kind:...] in its prompt (records are shown in order, and the history
// holds the newest observation). Turns and invalid commands are not recorded in a trajectory and stay 0.
EpisodeMetrics episode_metrics_symbolic(const SyntheticTask& task, const Trajectory& trajectory);
// The same for the text view (a policy that writes text, e.g. policies/lm): each summary segment's body is
// decoded with `codec` and measured by summary_metrics_text, its length in tokens of the codec's tokenizer
// (as `crl rollout` counts it, the end of turn included); records_seen = the newest "#NN/" record number
// in the environment's tokens (observations) of the execution segments before it.
EpisodeMetrics episode_metrics_text(const SyntheticTask& task, const Trajectory& trajectory,
                                    const Codec& codec);

// Sums episodes per task type; report() prints one line per type and one for all.
class MetricsTable {
 public:
  void add(const EpisodeMetrics& episode);
  std::string report() const;

  struct Totals {
    int episodes = 0, exact = 0, truncated = 0, invalid_commands = 0, compactions = 0, summaries = 0;
    int mentions = 0, invented = 0, repeated = 0;
    double recall_sum = 0, length_sum = 0, f1_sum = 0;
  };
  const Totals& totals(TaskType type) const { return by_type_[static_cast<int>(type)]; }
  Totals all() const;

 private:
  Totals by_type_[3];
};

}  // namespace crl::envs::synthetic
