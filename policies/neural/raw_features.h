#pragma once
// The shortcut-free feature view of the neural policy (`features: raw`; the default view is features.h).
//
// Why: the default view filters an answer's candidates by the question's key and hands the network each task
// type's rule as a precomputed bit ("key == the task's key", "latest of its key / kind", "after the previous
// pick"), so an untrained policy with the full context already answers early_fact (issue 15). This view
// gives the network only what is written in the context and leaves every rule to be learned:
//
//  * answer slot t: every record of the context is a candidate (one per distinct value, the newest record
//    holding it, since the emitted token is the value; within a task values are distinct except the LOG
//    status words, which are never an answer). No filter by key, kind or order.
//  * summary slot t: every record of the context not kept yet in this summary (keep:<i>), KEEP_TASK when the
//    context holds the task and it is not kept yet, and STOP (the same set as the default view).
//
// Candidate row (0/1 unless said): candidate class (record | task | stop); the record's own fields: kind
// (one-hot), key (one-hot), value class (4-digit code | word), position (one-hot over the vocabulary's
// records, and the scalar i / (records - 1)); the question's (or the task's) fields: type (one-hot or
// unknown) and key (one-hot or unknown), question shown; the slot (one-hot); what was chosen so far as raw
// fields: the number of picks (one-hot 0..4+), task kept, and the previous pick's position (one-hot and
// scalar) and key (one-hot), or "no previous pick"; a constant 1.
//
// Nothing compares two fields. The rules are learnable by the 2-layer MLP (network.h): key equality from the
// candidate's and the question's key one-hots (a hidden unit relu(key_c[j] + key_q[j] - 1) per key j fires
// only when both are j), "newest record of its kind" and "after the previous pick" from the position scalars
// (a unit relu(pos - prev_pos) is positive only after the previous pick; the softmax over candidates turns a
// larger weight on pos into "prefer the newest"), and kinds (FACT, MILESTONE, UPDATE) from the kind one-hot.
// A network that has not learned them is near the uniform pick over all candidates (tested).
#include <string>
#include <vector>

#include "policies/neural/features.h"

namespace crl::neural {

class RawFeaturizer {
 public:
  // Reads the synthetic suite's symbolic vocabulary; throws crl::Error naming the missing symbol otherwise.
  explicit RawFeaturizer(const std::vector<std::string>& symbols);
  int inputs() const { return inputs_; }

  // The same contract as Featurizer's (features.h); contexts come from Featurizer::parse on the same symbols.
  void summary_slot(const ParsedContext& context, int slot, const Chosen& chosen,
                    std::vector<Candidate>& candidates, RowMatrix& rows) const;
  void answer_slot(const ParsedContext& context, int slot, const Chosen& chosen,
                   std::vector<Candidate>& candidates, RowMatrix& rows) const;

 private:
  void fill_row(const ParsedContext& context, const Candidate& c, int slot, const Chosen& chosen,
                RowMatrix& rows, int r) const;
  std::vector<TokenId> keep_token_;  // record index -> keep:<i>
  std::vector<bool> is_code_;        // val:<4 digits>
  TokenId keep_task_ = 0, stop_ = 0;
  int records_ = 0, kinds_ = 0, keys_ = 0, types_ = 0;
  int f_class_ = 0, f_kind_ = 0, f_key_ = 0, f_value_ = 0, f_pos_ = 0, f_pos_scalar_ = 0, f_qtype_ = 0,
      f_qkey_ = 0, f_question_ = 0, f_slot_ = 0, f_count_ = 0, f_task_kept_ = 0, f_prev_none_ = 0,
      f_prev_pos_ = 0, f_prev_scalar_ = 0, f_prev_key_ = 0, f_bias_ = 0, inputs_ = 0;
};

// The feature view named by the neural policy's `features` parameter: "default" (features.h) or "raw" (this
// file). Throws crl::Error naming the field and the value otherwise.
Featurizer make_featurizer(const std::string& features, const std::vector<std::string>& symbols);

}  // namespace crl::neural
