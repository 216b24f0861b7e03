#pragma once
// The symbolic view of the synthetic suite, for small policies: the same tasks as the text view, rendered as
// ids of one fixed vocabulary (declared in the EnvSpec).
//
//   system prompt     [<system>]
//   user (the task)   [type:<type>, key:<target>]
//   record i          [rec:<i>, kind:<kind>, key:<key>, val:<value>]
//   END + question    [END, QUESTION, type:<type>, key:<target>]
//   invalid command   [ERROR]          limit reached: [<truncated>]
//   actions           [next] | [submit, val:<v>...]   (a plan is three val: tokens in order)
//   summary           memory-slot tokens: keep:<i> (keep record i), KEEP_TASK (keep the task), STOP
//
// The resume context after a compaction is written from the summary by symbolic_resume(): each kept record
// is copied as it was observed, so a small policy chooses *what* to keep, never writes values itself. A
// keep:<i> of a record not yet observed is written as [rec:<i>, UNSEEN] (nothing leaks from the future) and
// counts as an invention in the metrics, exactly as a value the text view names but never saw.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/token.h"
#include "envs/env.h"
#include "envs/synthetic/task.h"

namespace crl::envs::synthetic {

class Vocabulary {
 public:
  static const Vocabulary& get();  // built once; ids never change within a build

  // Every symbol: the 205 of the 16-record namespaces, then rec:17..48 and keep:17..48 (the hard namespace),
  // appended so that no id of the first 205 moved.
  const std::vector<std::string>& names() const { return names_; }
  int size() const { return static_cast<int>(names_.size()); }
  // The vocabulary an env of `records` records per task declares (EnvSpec::symbols): the first 205 names
  // for 16 records, all of them for 48. A policy sized by its env's vocabulary (the neural featurizer) is
  // therefore unchanged in the 16-record namespaces.
  std::vector<std::string> names_for(int records) const;
  std::optional<TokenId> find(std::string_view name) const;
  TokenId id(std::string_view name) const;  // CRL_CHECKs that the name exists
  const std::string& name(TokenId id) const { return names_.at(id); }

  TokenId type(TaskType t) const { return type_[static_cast<int>(t)]; }
  TokenId rec(int index) const { return rec_[index]; }    // 0-based record index, < kMaxRecordsPerTask
  TokenId keep(int index) const { return keep_[index]; }  // 0-based record index, < kMaxRecordsPerTask
  // keep:<i> -> i (0-based); -1 for any other id.
  int keep_index(TokenId id) const;
  // rec:<i> -> i (0-based); -1 for any other id.
  int rec_index(TokenId id) const;
  bool is_kind(TokenId id) const { return id >= first_kind_ && id < end_kind_; }
  // val:<v> -> v; empty for any other id.
  std::string_view value_of(TokenId id) const;
  std::optional<TokenId> value(std::string_view v) const { return find("val:" + std::string(v)); }

  TokenId system, turn, summarize, resume, resume_end, truncated, next, submit, end, question, error, unseen,
      stop, keep_task;

 private:
  Vocabulary();
  TokenId add(std::string name);
  std::vector<std::string> names_;
  std::unordered_map<std::string, TokenId> ids_;
  TokenId type_[3];
  TokenId rec_[kMaxRecordsPerTask];
  TokenId keep_[kMaxRecordsPerTask];
  TokenId base_size_ = 0;  // names of the 16-record vocabulary
  TokenId first_value_ = 0, end_value_ = 0;
  TokenId first_keep_ = 0;
  TokenId first_rec_ = 0, first_kind_ = 0, end_kind_ = 0;
};

// The fixed template symbols of the episode's context (turn header, summary instruction, resume wrapper).
SymbolicTemplate symbolic_template();

std::vector<TokenId> symbolic_user(const SyntheticTask& task);
std::vector<TokenId> symbolic_record(const SyntheticTask& task, int index);
std::vector<TokenId> symbolic_end(const SyntheticTask& task);

// The resume body written from a summary: KEEP_TASK -> [type, key]; keep:<i> -> the record as observed (or
// [rec:<i>, UNSEEN] if i >= records_seen); STOP ends the summary; other ids are ignored. The episode wraps it
// in the template's resume_prefix / resume_suffix.
std::vector<TokenId> symbolic_resume(const SyntheticTask& task, int records_seen,
                                     std::span<const TokenId> summary);

// The answer text of a symbolic submit: the val: tokens joined by '>' inside {"plan":"..."} for an ordered
// plan, by spaces otherwise. A non-value token makes the answer empty (always wrong).
std::string symbolic_answer_text(TaskType type, std::span<const TokenId> answer);

// The action that submits `answer_text` (the task's answer format) in the symbolic view.
std::vector<TokenId> symbolic_submit(TaskType type, std::string_view answer_text);

}  // namespace crl::envs::synthetic
