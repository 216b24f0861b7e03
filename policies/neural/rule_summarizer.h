#pragma once
// Fixed summary policies of the neural policy, the baselines of issue 15 (`summary` parameter):
//
//   learned  the summary network samples the summary (default; trained unless frozen)
//   frozen   the summary network samples, its actor is never updated (an alias of frozen_summary: true)
//   rule     a competent keyword/recency rule: KEEP_TASK when the context holds the task, then the records
//            ranked by (key == the task's key) first, then kind FACT or MILESTONE, newest first within a
//            rank, while the summary has room; records matching neither rule are dropped; then STOP
//   none     the no-memory floor: STOP at once (the resume context is empty; only the tail survives)
//
// The rule reads the same parsed context as the network (features.h), never the task. Its decisions are
// deterministic: every token is recorded as sampled with log-prob 0 (probability 1 under this policy) and
// value 0. They are not trained: in the rule and none modes the summary network's actor is never updated
// (exactly as in the frozen mode), so a token the network did not choose never moves its weights or a shared
// trunk's; the critic still sees the decisions.
#include <memory>
#include <string>
#include <vector>

#include "engine/turn.h"
#include "policies/neural/features.h"

namespace crl::neural {

enum class SummaryMode { kLearned, kFrozen, kRule, kNone };
// "learned" | "frozen" | "rule" | "none"; throws crl::Error naming the field `summary` and the value.
SummaryMode parse_summary_mode(const std::string& text);

class RuleSummarizer {
 public:
  // kRule or kNone over the synthetic suite's symbolic vocabulary; throws crl::Error naming a missing symbol.
  RuleSummarizer(SummaryMode mode, const std::vector<std::string>& symbols);
  // The summary of `context` in at most `max_tokens` tokens (STOP included when there is room).
  Decision decide(const ParsedContext& context, int64_t max_tokens) const;

 private:
  SummaryMode mode_;
  std::vector<TokenId> keep_token_;  // record index -> keep:<i>
  TokenId keep_task_ = 0, stop_ = 0;
  std::vector<bool> salient_kind_;  // ParsedRecord::kind index -> FACT or MILESTONE
};

// The fixed summarizer of a mode (null for learned and frozen: the network summarizes).
std::shared_ptr<const RuleSummarizer> make_fixed_summarizer(SummaryMode mode,
                                                            const std::vector<std::string>& symbols);

}  // namespace crl::neural
