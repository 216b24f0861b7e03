#include "policies/neural/raw_features.h"

#include <algorithm>
#include <string_view>

#include "engine/error.h"

namespace crl::neural {

RawFeaturizer::RawFeaturizer(const std::vector<std::string>& symbols) {
  // The same scan as Featurizer's constructor, so kind/key/type indices agree with ParsedContext's.
  const size_t n = symbols.size();
  is_code_.assign(n, false);
  std::vector<std::pair<int, TokenId>> keeps;
  bool have_keep_task = false, have_stop = false;
  for (size_t id = 0; id < n; ++id) {
    const std::string_view s = symbols[id];
    if (s.starts_with("rec:")) {
      records_ = std::max(records_, std::stoi(std::string(s.substr(4))));
    } else if (s.starts_with("keep:")) {
      keeps.emplace_back(std::stoi(std::string(s.substr(5))) - 1, static_cast<TokenId>(id));
    } else if (s.starts_with("kind:")) {
      ++kinds_;
    } else if (s.starts_with("key:")) {
      ++keys_;
    } else if (s.starts_with("type:")) {
      ++types_;
    } else if (s.starts_with("val:")) {
      const std::string_view v = s.substr(4);
      is_code_[id] =
          v.size() == 4 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
    } else if (s == "KEEP_TASK") {
      keep_task_ = static_cast<TokenId>(id), have_keep_task = true;
    } else if (s == "STOP") {
      stop_ = static_cast<TokenId>(id), have_stop = true;
    }
  }
  if (records_ == 0 || kinds_ == 0 || keys_ == 0 || types_ == 0 || !have_keep_task || !have_stop) {
    throw Error("policy \"neural\"", "features",
                "raw: the environment's vocabulary lacks rec:/kind:/key:/type:/KEEP_TASK/STOP symbols (the "
                "neural policy needs the synthetic suite's symbolic vocabulary)");
  }
  keep_token_.assign(records_, -1);
  for (const auto& [i, id] : keeps) {
    if (i >= 0 && i < records_) keep_token_[i] = id;
  }
  for (int i = 0; i < records_; ++i) {
    if (keep_token_[i] < 0)
      throw Error("policy \"neural\"", "features",
                  "raw: no keep: symbol for record " + std::to_string(i + 1));
  }
  int at = 0;
  f_class_ = at, at += 3;
  f_kind_ = at, at += kinds_;
  f_key_ = at, at += keys_;
  f_value_ = at, at += 2;
  f_pos_ = at, at += records_;
  f_pos_scalar_ = at++;
  f_qtype_ = at, at += types_ + 1;
  f_qkey_ = at, at += keys_ + 1;
  f_question_ = at++;
  f_slot_ = at, at += kMaxSlots;
  f_count_ = at, at += kMaxChosenBucket + 1;
  f_task_kept_ = at++;
  f_prev_none_ = at++;
  f_prev_pos_ = at, at += records_;
  f_prev_scalar_ = at++;
  f_prev_key_ = at, at += keys_;
  f_bias_ = at++;
  inputs_ = at;
}

void RawFeaturizer::fill_row(const ParsedContext& context, const Candidate& c, int slot, const Chosen& chosen,
                             RowMatrix& rows, int r) const {
  auto row = rows.row(r);
  row.setZero();
  const float scale = records_ > 1 ? 1.0f / static_cast<float>(records_ - 1) : 0.0f;
  if (c.record >= 0) {
    const ParsedRecord& rec = context.records[c.record];
    row[f_class_] = 1.0f;
    row[f_kind_ + rec.kind] = 1.0f;
    row[f_key_ + rec.key] = 1.0f;
    const bool code =
        rec.value >= 0 && static_cast<size_t>(rec.value) < is_code_.size() && is_code_[rec.value];
    row[f_value_ + (code ? 0 : 1)] = 1.0f;
    row[f_pos_ + c.record] = 1.0f;
    row[f_pos_scalar_] = static_cast<float>(c.record) * scale;
  } else {
    row[f_class_ + (c.token == keep_task_ ? 1 : 2)] = 1.0f;
  }
  row[f_qtype_ + (context.type >= 0 ? context.type : types_)] = 1.0f;
  row[f_qkey_ + (context.target >= 0 ? context.target : keys_)] = 1.0f;
  row[f_question_] = context.question ? 1.0f : 0.0f;
  row[f_slot_ + std::min(slot, kMaxSlots - 1)] = 1.0f;
  row[f_count_ + std::min(static_cast<int>(chosen.records.size()), kMaxChosenBucket)] = 1.0f;
  row[f_task_kept_] = chosen.task ? 1.0f : 0.0f;
  if (chosen.records.empty()) {
    row[f_prev_none_] = 1.0f;
  } else {
    const int prev = chosen.records.back();
    row[f_prev_pos_ + prev] = 1.0f;
    row[f_prev_scalar_] = static_cast<float>(prev) * scale;
    if (context.records[prev].present) row[f_prev_key_ + context.records[prev].key] = 1.0f;
  }
  row[f_bias_] = 1.0f;
}

void RawFeaturizer::summary_slot(const ParsedContext& context, int slot, const Chosen& chosen,
                                 std::vector<Candidate>& candidates, RowMatrix& rows) const {
  summary_candidates(context, keep_token_, keep_task_, stop_, chosen, candidates);
  rows.resize(static_cast<Eigen::Index>(candidates.size()), inputs_);
  for (size_t r = 0; r < candidates.size(); ++r)
    fill_row(context, candidates[r], slot, chosen, rows, static_cast<int>(r));
}

void RawFeaturizer::answer_slot(const ParsedContext& context, int slot, const Chosen& chosen,
                                std::vector<Candidate>& candidates, RowMatrix& rows) const {
  candidates.clear();
  // Every record of the context, newest first, one candidate per distinct value; then back to index order.
  for (int i = records_ - 1; i >= 0; --i) {
    const ParsedRecord& rec = context.records[i];
    if (!rec.present) continue;
    bool duplicate = false;
    for (const Candidate& c : candidates) duplicate |= c.token == rec.value;
    if (!duplicate) candidates.push_back(Candidate{rec.value, i});
  }
  std::reverse(candidates.begin(), candidates.end());
  rows.resize(static_cast<Eigen::Index>(candidates.size()), inputs_);
  for (size_t r = 0; r < candidates.size(); ++r)
    fill_row(context, candidates[r], slot, chosen, rows, static_cast<int>(r));
}

Featurizer make_featurizer(const std::string& features, const std::vector<std::string>& symbols) {
  if (features == "default") return Featurizer(symbols);
  if (features == "raw") return Featurizer(symbols, std::make_shared<const RawFeaturizer>(symbols));
  throw Error("policy \"neural\"", "features", "value " + quote(features) + " is not default or raw");
}

}  // namespace crl::neural
