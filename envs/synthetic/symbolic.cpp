#include "envs/synthetic/symbolic.h"

#include <cstdio>

#include "engine/error.h"

namespace crl::envs::synthetic {

namespace {
std::string two_digits(int i) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%02d", i);
  return buf;
}
}  // namespace

Vocabulary::Vocabulary() {
  // Order is part of the symbolic format (a trained small policy's embedding rows): append, never reorder.
  system = add("<system>");
  turn = add("<turn>");
  summarize = add("<summarize>");
  resume = add("<resume>");
  resume_end = add("</resume>");
  truncated = add("<truncated>");
  next = add("next");
  submit = add("submit");
  end = add("END");
  question = add("QUESTION");
  error = add("ERROR");
  unseen = add("UNSEEN");
  stop = add("STOP");
  keep_task = add("KEEP_TASK");
  for (TaskType t : kTaskTypes) type_[static_cast<int>(t)] = add("type:" + std::string(task_type_name(t)));
  first_kind_ = static_cast<TokenId>(names_.size());
  for (std::string_view k : record_kinds()) add("kind:" + std::string(k));
  end_kind_ = static_cast<TokenId>(names_.size());
  add("key:code");
  for (std::string_view k : fact_labels()) add("key:" + std::string(k));
  for (std::string_view k : update_keys()) add("key:" + std::string(k));
  add("key:step");
  add("key:status");
  first_rec_ = static_cast<TokenId>(names_.size());
  for (int i = 0; i < kRecordsPerTask; ++i) rec_[i] = add("rec:" + two_digits(i + 1));
  first_keep_ = static_cast<TokenId>(names_.size());
  for (int i = 0; i < kRecordsPerTask; ++i) keep_[i] = add("keep:" + two_digits(i + 1));
  first_value_ = static_cast<TokenId>(names_.size());
  for (auto pool : {code_pool(), update_word_pool(), plan_word_pool(), status_word_pool()}) {
    for (std::string_view v : pool) add("val:" + std::string(v));
  }
  end_value_ = static_cast<TokenId>(names_.size());
  // The hard namespace's 48 records: appended after everything above.
  base_size_ = static_cast<TokenId>(names_.size());
  for (int i = kRecordsPerTask; i < kMaxRecordsPerTask; ++i) rec_[i] = add("rec:" + two_digits(i + 1));
  for (int i = kRecordsPerTask; i < kMaxRecordsPerTask; ++i) keep_[i] = add("keep:" + two_digits(i + 1));
}

std::vector<std::string> Vocabulary::names_for(int records) const {
  if (records > kRecordsPerTask) return names_;
  return std::vector<std::string>(names_.begin(), names_.begin() + base_size_);
}

TokenId Vocabulary::add(std::string name) {
  const auto id = static_cast<TokenId>(names_.size());
  CRL_CHECK(ids_.emplace(name, id).second, "symbol defined twice: " << name);
  names_.push_back(std::move(name));
  return id;
}

const Vocabulary& Vocabulary::get() {
  static const Vocabulary kVocabulary;
  return kVocabulary;
}

std::optional<TokenId> Vocabulary::find(std::string_view name) const {
  auto it = ids_.find(std::string(name));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

TokenId Vocabulary::id(std::string_view name) const {
  const auto found = find(name);
  CRL_CHECK(found.has_value(), "unknown symbol " << name);
  return *found;
}

namespace {
// Index of `id` in a table of ids (two contiguous runs: 1-16 in the base vocabulary, 17-48 appended).
int index_in(const TokenId (&table)[kMaxRecordsPerTask], TokenId id) {
  if (id >= table[0] && id < table[0] + kRecordsPerTask) return id - table[0];
  const TokenId extra = table[kRecordsPerTask];
  if (id >= extra && id < extra + (kMaxRecordsPerTask - kRecordsPerTask)) return kRecordsPerTask + id - extra;
  return -1;
}
}  // namespace

int Vocabulary::keep_index(TokenId id) const {
  return index_in(keep_, id);
}

int Vocabulary::rec_index(TokenId id) const {
  return index_in(rec_, id);
}

std::string_view Vocabulary::value_of(TokenId id) const {
  if (id < first_value_ || id >= end_value_) return {};
  return std::string_view(names_[id]).substr(4);  // after "val:"
}

SymbolicTemplate symbolic_template() {
  const Vocabulary& v = Vocabulary::get();
  SymbolicTemplate t;
  t.turn_header = {v.turn};
  t.summary_instruction = {v.summarize};
  t.resume_prefix = {v.resume};
  t.resume_suffix = {v.resume_end};
  t.truncation_marker = {v.truncated};
  return t;
}

std::vector<TokenId> symbolic_user(const SyntheticTask& task) {
  const Vocabulary& v = Vocabulary::get();
  return {v.type(task.type), v.id("key:" + task.target)};
}

std::vector<TokenId> symbolic_record(const SyntheticTask& task, int index) {
  const Vocabulary& v = Vocabulary::get();
  const Record& r = task.records[index];
  return {v.rec(index), v.id("kind:" + r.kind), v.id("key:" + r.key), v.id("val:" + r.value)};
}

std::vector<TokenId> symbolic_end(const SyntheticTask& task) {
  const Vocabulary& v = Vocabulary::get();
  return {v.end, v.question, v.type(task.type), v.id("key:" + task.target)};
}

std::vector<TokenId> symbolic_resume(const SyntheticTask& task, int records_seen,
                                     std::span<const TokenId> summary) {
  const Vocabulary& v = Vocabulary::get();
  std::vector<TokenId> out;
  for (const TokenId id : summary) {
    if (id == v.stop) break;
    if (id == v.keep_task) {
      const auto user = symbolic_user(task);
      out.insert(out.end(), user.begin(), user.end());
      continue;
    }
    const int index = v.keep_index(id);
    if (index < 0) continue;
    if (index < records_seen) {
      const auto record = symbolic_record(task, index);
      out.insert(out.end(), record.begin(), record.end());
    } else {
      out.push_back(v.rec(index));
      out.push_back(v.unseen);
    }
  }
  return out;
}

std::string symbolic_answer_text(TaskType type, std::span<const TokenId> answer) {
  const Vocabulary& v = Vocabulary::get();
  std::string joined;
  for (const TokenId id : answer) {
    const std::string_view value = v.value_of(id);
    if (value.empty()) return "";
    if (!joined.empty()) joined += type == TaskType::kOrderedPlan ? ">" : " ";
    joined += value;
  }
  if (type == TaskType::kOrderedPlan) return "{\"plan\":\"" + joined + "\"}";
  return joined;
}

std::vector<TokenId> symbolic_submit(TaskType type, std::string_view answer_text) {
  const Vocabulary& v = Vocabulary::get();
  std::vector<TokenId> action = {v.submit};
  std::string_view body = answer_text;
  if (type == TaskType::kOrderedPlan) {
    constexpr std::string_view kOpen = "{\"plan\":\"", kClose = "\"}";
    CRL_CHECK(body.starts_with(kOpen) && body.ends_with(kClose), "not a plan answer: " << answer_text);
    body = body.substr(kOpen.size(), body.size() - kOpen.size() - kClose.size());
  }
  const char separator = type == TaskType::kOrderedPlan ? '>' : ' ';
  while (!body.empty()) {
    const size_t cut = body.find(separator);
    const std::string_view part = body.substr(0, cut);
    const auto id = v.value(part);
    CRL_CHECK(id.has_value(), "no symbol for value " << part);
    action.push_back(*id);
    body = cut == std::string_view::npos ? std::string_view() : body.substr(cut + 1);
  }
  return action;
}

}  // namespace crl::envs::synthetic
