#include "policies/neural/features.h"

#include <algorithm>
#include <string_view>

#include "engine/error.h"
#include "policies/neural/raw_features.h"

namespace crl::neural {

Featurizer::Featurizer(const std::vector<std::string>& symbols) {
  const size_t n = symbols.size();
  rec_of_.assign(n, -1);
  keep_of_.assign(n, -1);
  kind_of_.assign(n, -1);
  key_of_.assign(n, -1);
  type_of_.assign(n, -1);
  is_value_.assign(n, false);
  std::vector<std::string> kinds, keys, types;
  auto need = [&](std::string_view name) -> TokenId {
    const auto it = std::find(symbols.begin(), symbols.end(), name);
    if (it == symbols.end()) {
      throw Error("policy \"neural\"", "env",
                  "the environment has no symbol " + quote(std::string(name)) +
                      " (the neural policy needs the synthetic suite's symbolic vocabulary)");
    }
    return static_cast<TokenId>(it - symbols.begin());
  };
  next = need("next");
  submit = need("submit");
  stop = need("STOP");
  keep_task = need("KEEP_TASK");
  question = need("QUESTION");
  unseen = need("UNSEEN");
  for (size_t id = 0; id < n; ++id) {
    const std::string_view s = symbols[id];
    auto number = [&](size_t prefix) { return std::stoi(std::string(s.substr(prefix))) - 1; };
    if (s.starts_with("rec:")) {
      rec_of_[id] = number(4);
      records_ = std::max(records_, rec_of_[id] + 1);
    } else if (s.starts_with("keep:")) {
      keep_of_[id] = number(5);
    } else if (s.starts_with("kind:")) {
      kind_of_[id] = static_cast<int>(kinds.size());
      kinds.emplace_back(s);
    } else if (s.starts_with("key:")) {
      key_of_[id] = static_cast<int>(keys.size());
      keys.emplace_back(s);
    } else if (s.starts_with("type:")) {
      type_of_[id] = static_cast<int>(types.size());
      if (s == "type:ordered_plan") ordered_plan_ = type_of_[id];
      types.emplace_back(s);
    } else if (s.starts_with("val:")) {
      is_value_[id] = true;
    }
  }
  if (records_ == 0 || kinds.empty() || keys.empty() || types.empty() || ordered_plan_ < 0) {
    throw Error(
        "policy \"neural\"", "env",
        "the environment's vocabulary lacks rec:/kind:/key:/type:ordered_plan symbols (the neural policy "
        "needs the synthetic suite's symbolic vocabulary)");
  }
  keep_token_.assign(records_, 0);
  for (size_t id = 0; id < n; ++id) {
    if (keep_of_[id] >= 0 && keep_of_[id] < records_) keep_token_[keep_of_[id]] = static_cast<TokenId>(id);
  }
  for (int i = 0; i < records_; ++i) {
    if (keep_token_[i] == 0)
      throw Error("policy \"neural\"", "env", "no keep: symbol for record " + std::to_string(i + 1));
  }
  kinds_ = static_cast<int>(kinds.size());
  keys_ = static_cast<int>(keys.size());
  types_ = static_cast<int>(types.size());
  int at = 0;
  f_class_ = at, at += 3;
  f_kind_ = at, at += kinds_;
  f_key_ = at, at += keys_;
  f_pos_ = at, at += records_;
  f_pos_scalar_ = at++;
  f_match_ = at++;
  f_latest_key_ = at++;
  f_latest_kind_ = at++;
  f_after_ = at++;
  f_type_ = at, at += types_ + 1;
  f_slot_ = at, at += kMaxSlots;
  f_count_ = at, at += kMaxChosenBucket + 1;
  f_task_kept_ = at++;
  f_bias_ = at++;
  inputs_ = at;
}

Featurizer::Featurizer(const std::vector<std::string>& symbols, std::shared_ptr<const RawFeaturizer> raw)
    : Featurizer(symbols) {
  raw_ = std::move(raw);
  if (raw_) inputs_ = raw_->inputs();
}

ParsedContext Featurizer::parse(std::span<const TokenId> t) const {
  ParsedContext c;
  c.records.assign(records_, ParsedRecord{});
  const size_t n = t.size();
  auto valid = [&](size_t i) { return i < n && t[i] >= 0 && static_cast<size_t>(t[i]) < rec_of_.size(); };
  for (size_t i = 0; i < n; ++i) {
    if (!valid(i)) continue;
    const TokenId id = t[i];
    if (const int r = rec_of_[id]; r >= 0) {
      if (valid(i + 3) && kind_of_[t[i + 1]] >= 0 && key_of_[t[i + 2]] >= 0 && is_value_[t[i + 3]]) {
        c.records[r] = ParsedRecord{true, kind_of_[t[i + 1]], key_of_[t[i + 2]], t[i + 3]};
        i += 3;
      }
    } else if (const int ty = type_of_[id]; ty >= 0) {
      c.type = ty;
      if (valid(i + 1) && key_of_[t[i + 1]] >= 0) {
        c.target = key_of_[t[i + 1]];
        ++i;
      }
    } else if (id == question) {
      c.question = true;
    }
  }
  return c;
}

int Featurizer::answer_length(const ParsedContext& context) const {
  return context.type == ordered_plan_ ? 3 : 1;
}

int Featurizer::find(const std::vector<Candidate>& candidates, TokenId token) {
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].token == token) return static_cast<int>(i);
  }
  return -1;
}

void Featurizer::choose(const ParsedContext& context, TokenId token, Chosen& chosen) const {
  if (token == keep_task) {
    chosen.task = true;
    return;
  }
  if (token >= 0 && static_cast<size_t>(token) < keep_of_.size() && keep_of_[token] >= 0) {
    chosen.records.push_back(keep_of_[token]);
    return;
  }
  // An answer's value: the latest record holding it (the one the candidate stood for).
  for (int i = records_ - 1; i >= 0; --i) {
    if (context.records[i].present && context.records[i].value == token) {
      chosen.records.push_back(i);
      return;
    }
  }
}

void Featurizer::fill_row(const ParsedContext& context, const Candidate& c, int slot, const Chosen& chosen,
                          RowMatrix& rows, int r) const {
  auto row = rows.row(r);
  row.setZero();
  if (c.record >= 0) {
    const ParsedRecord& rec = context.records[c.record];
    row[f_class_] = 1.0f;
    row[f_kind_ + rec.kind] = 1.0f;
    row[f_key_ + rec.key] = 1.0f;
    row[f_pos_ + c.record] = 1.0f;
    row[f_pos_scalar_] =
        records_ > 1 ? static_cast<float>(c.record) / static_cast<float>(records_ - 1) : 0.0f;
    row[f_match_] = context.target >= 0 && rec.key == context.target ? 1.0f : 0.0f;
    bool latest_key = true, latest_kind = true;
    for (int j = c.record + 1; j < records_; ++j) {
      const ParsedRecord& later = context.records[j];
      if (!later.present) continue;
      latest_key &= later.key != rec.key;
      latest_kind &= later.kind != rec.kind;
    }
    row[f_latest_key_] = latest_key ? 1.0f : 0.0f;
    row[f_latest_kind_] = latest_kind ? 1.0f : 0.0f;
    int last = -1;
    for (int k : chosen.records) last = std::max(last, k);
    row[f_after_] = c.record > last ? 1.0f : 0.0f;
  } else {
    row[f_class_ + (c.token == keep_task ? 1 : 2)] = 1.0f;
  }
  row[f_type_ + (context.type >= 0 ? context.type : types_)] = 1.0f;
  row[f_slot_ + std::min(slot, kMaxSlots - 1)] = 1.0f;
  row[f_count_ + std::min(static_cast<int>(chosen.records.size()), kMaxChosenBucket)] = 1.0f;
  row[f_task_kept_] = chosen.task ? 1.0f : 0.0f;
  row[f_bias_] = 1.0f;
}

void summary_candidates(const ParsedContext& context, const std::vector<TokenId>& keep_token,
                        TokenId keep_task, TokenId stop, const Chosen& chosen,
                        std::vector<Candidate>& candidates) {
  candidates.clear();
  for (size_t i = 0; i < context.records.size() && i < keep_token.size(); ++i) {
    if (!context.records[i].present) continue;
    const int record = static_cast<int>(i);
    if (std::find(chosen.records.begin(), chosen.records.end(), record) != chosen.records.end()) continue;
    candidates.push_back(Candidate{keep_token[i], record});
  }
  if (context.type >= 0 && context.target >= 0 && !chosen.task)
    candidates.push_back(Candidate{keep_task, -1});
  candidates.push_back(Candidate{stop, -1});
}

void Featurizer::summary_slot(const ParsedContext& context, int slot, const Chosen& chosen,
                              std::vector<Candidate>& candidates, RowMatrix& rows) const {
  if (raw_) return raw_->summary_slot(context, slot, chosen, candidates, rows);
  summary_candidates(context, keep_token_, keep_task, stop, chosen, candidates);
  rows.resize(static_cast<Eigen::Index>(candidates.size()), inputs_);
  for (size_t r = 0; r < candidates.size(); ++r)
    fill_row(context, candidates[r], slot, chosen, rows, static_cast<int>(r));
}

void Featurizer::answer_slot(const ParsedContext& context, int slot, const Chosen& chosen,
                             std::vector<Candidate>& candidates, RowMatrix& rows) const {
  if (raw_) return raw_->answer_slot(context, slot, chosen, candidates, rows);
  candidates.clear();
  // An answer is read in order of appearance: each slot points after the previous slot's record.
  int last = -1;
  for (int k : chosen.records) last = std::max(last, k);
  // The question names a key: the answer points at records of that key (all records when none is left).
  bool any_match = false;
  for (int i = records_ - 1; i > last; --i)
    any_match |= context.records[i].present && context.records[i].key == context.target;
  // Newest first, one candidate per distinct value; then back to index order.
  for (int i = records_ - 1; i > last; --i) {
    const ParsedRecord& rec = context.records[i];
    if (!rec.present || (any_match && rec.key != context.target)) continue;
    bool duplicate = false;
    for (const Candidate& c : candidates) duplicate |= c.token == rec.value;
    if (!duplicate) candidates.push_back(Candidate{rec.value, i});
  }
  std::reverse(candidates.begin(), candidates.end());
  rows.resize(static_cast<Eigen::Index>(candidates.size()), inputs_);
  for (size_t r = 0; r < candidates.size(); ++r)
    fill_row(context, candidates[r], slot, chosen, rows, static_cast<int>(r));
}

}  // namespace crl::neural
