#include "policies/neural/rule_summarizer.h"

#include <algorithm>
#include <string_view>

#include "engine/error.h"

namespace crl::neural {

SummaryMode parse_summary_mode(const std::string& text) {
  if (text == "learned") return SummaryMode::kLearned;
  if (text == "frozen") return SummaryMode::kFrozen;
  if (text == "rule") return SummaryMode::kRule;
  if (text == "none") return SummaryMode::kNone;
  throw Error("policy \"neural\"", "summary",
              "value " + quote(text) + " is not learned, frozen, rule or none");
}

RuleSummarizer::RuleSummarizer(SummaryMode mode, const std::vector<std::string>& symbols) : mode_(mode) {
  CRL_CHECK(mode == SummaryMode::kRule || mode == SummaryMode::kNone, "RuleSummarizer: not a fixed mode");
  // Kind indices follow the vocabulary's order, as in Featurizer (features.cpp).
  std::vector<std::pair<int, TokenId>> keeps;
  bool have_task = false, have_stop = false;
  int records = 0;
  for (size_t id = 0; id < symbols.size(); ++id) {
    const std::string_view s = symbols[id];
    if (s.starts_with("kind:")) {
      salient_kind_.push_back(s == "kind:FACT" || s == "kind:MILESTONE");
    } else if (s.starts_with("rec:")) {
      records = std::max(records, std::stoi(std::string(s.substr(4))));
    } else if (s.starts_with("keep:")) {
      keeps.emplace_back(std::stoi(std::string(s.substr(5))) - 1, static_cast<TokenId>(id));
    } else if (s == "KEEP_TASK") {
      keep_task_ = static_cast<TokenId>(id), have_task = true;
    } else if (s == "STOP") {
      stop_ = static_cast<TokenId>(id), have_stop = true;
    }
  }
  if (!have_task || !have_stop || records == 0) {
    throw Error(
        "policy \"neural\"", "summary",
        "the environment's vocabulary lacks KEEP_TASK/STOP/rec: symbols (the summary baselines need the "
        "synthetic suite's symbolic vocabulary)");
  }
  keep_token_.assign(records, -1);
  for (const auto& [i, id] : keeps) {
    if (i >= 0 && i < records) keep_token_[i] = id;
  }
}

Decision RuleSummarizer::decide(const ParsedContext& context, int64_t max_tokens) const {
  Decision d;
  auto emit = [&](TokenId token) {
    d.tokens.push_back(token);
    d.logprobs.push_back(0.0f);
    d.values.push_back(0.0f);
  };
  if (mode_ == SummaryMode::kRule) {
    if (context.type >= 0 && context.target >= 0 && max_tokens > 0) emit(keep_task_);
    // Rank: 2 for the task's key, 1 for a FACT / MILESTONE kind; newest first within a rank.
    std::vector<std::pair<int, int>> ranked;  // (-rank, -index): sorts best, then newest, first
    for (int i = 0; i < static_cast<int>(context.records.size()); ++i) {
      const ParsedRecord& r = context.records[i];
      if (!r.present || i >= static_cast<int>(keep_token_.size()) || keep_token_[i] < 0) continue;
      const bool key = context.target >= 0 && r.key == context.target;
      const bool kind =
          r.kind >= 0 && r.kind < static_cast<int>(salient_kind_.size()) && salient_kind_[r.kind];
      const int rank = (key ? 2 : 0) + (kind ? 1 : 0);
      if (rank > 0) ranked.emplace_back(-rank, -i);
    }
    std::sort(ranked.begin(), ranked.end());
    for (const auto& [rank, index] : ranked) {
      if (static_cast<int64_t>(d.tokens.size()) >= max_tokens) break;
      emit(keep_token_[-index]);
    }
  }
  if (static_cast<int64_t>(d.tokens.size()) < max_tokens) emit(stop_);
  return d;
}

std::shared_ptr<const RuleSummarizer> make_fixed_summarizer(SummaryMode mode,
                                                            const std::vector<std::string>& symbols) {
  if (mode != SummaryMode::kRule && mode != SummaryMode::kNone) return nullptr;
  return std::make_shared<const RuleSummarizer>(mode, symbols);
}

}  // namespace crl::neural
