#pragma once
// What the neural policy sees: the records, the task and the question parsed from a symbolic context of the
// synthetic suite, and one feature row per candidate of a decision.
//
// The context is read, never the task: a record is a run [rec:<i>, kind:<k>, key:<y>, val:<v>] anywhere in
// the prompt (observed, or copied into a resume message; [rec:<i>, UNSEEN] is nothing), the task is a pair
// [type:<t>, key:<y>] (the user turn, a kept task, or the END question), and the question is the QUESTION
// symbol. A record seen twice (in a resume and in the copied tail) is one record.
//
// Decisions and their candidates:
//  * summary slot t (memory-slot tokens, sampled one after the other): every record of the context not kept
//    yet in this summary (token keep:<i>), KEEP_TASK when the context holds the task and it is not kept yet,
//    and STOP;
//  * answer slot t (after the question; 3 slots for an ordered plan, else 1): the records of the question's
//    key (every record when the context holds none) after the record of the previous slot (a plan is read in
//    order of appearance), one per distinct value (the latest record holding it), emitting its val: token.
//    Which of them is the answer (the FACT, the latest update, the MILESTONEs and not the DRAFT/REJECTED
//    steps) is learned.
// Candidate row (all 0/1 except the position scalar): candidate class (record | task | stop), the record's
// kind and key (one-hot), its index (one-hot and i/15), key == the task's key, latest record of its key,
// latest of its kind, after the last record chosen in this decision sequence; the task type (one-hot, or
// unknown), the slot (one-hot), how many records were chosen (one-hot, 0..4+), task kept, and a constant 1.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/token.h"
#include "policies/neural/network.h"

namespace crl::neural {

constexpr int kMaxSlots = 8;
constexpr int kMaxChosenBucket = 4;

struct ParsedRecord {
  bool present = false;
  int kind = -1;
  int key = -1;
  TokenId value = 0;
};

struct ParsedContext {
  std::vector<ParsedRecord> records;  // by record index
  int type = -1;                      // index into the type symbols, -1 unknown
  int target = -1;                    // key index of the task, -1 unknown
  bool question = false;
};

struct Candidate {
  TokenId token = 0;
  int record = -1;  // record index; -1 for KEEP_TASK and STOP
};

// What was chosen earlier in the same decision sequence (a summary, an answer).
struct Chosen {
  std::vector<int> records;
  bool task = false;
};

// The candidates of a summary slot, shared by both views: every record of the context not chosen yet
// (keep:<i>), then KEEP_TASK when the context holds the task and it is not kept yet (the env would otherwise
// restore a task the policy lost), then STOP.
void summary_candidates(const ParsedContext& context, const std::vector<TokenId>& keep_token,
                        TokenId keep_task, TokenId stop, const Chosen& chosen,
                        std::vector<Candidate>& candidates);

class RawFeaturizer;  // raw_features.h

class Featurizer {
 public:
  // Reads the vocabulary of the synthetic suite's symbolic view. Throws crl::Error naming the first missing
  // symbol when `symbols` is another vocabulary.
  explicit Featurizer(const std::vector<std::string>& symbols);
  // The shortcut-free view (`features: raw`, raw_features.h): the same parse and choose, its candidates and
  // rows. make_featurizer() (raw_features.h) picks the view by name.
  Featurizer(const std::vector<std::string>& symbols, std::shared_ptr<const RawFeaturizer> raw);
  int inputs() const { return inputs_; }

  ParsedContext parse(std::span<const TokenId> tokens) const;
  // Number of value tokens the answer needs (3 for an ordered plan, 1 otherwise; 1 when the type is unknown).
  int answer_length(const ParsedContext& context) const;

  // Fills the candidates and their rows (rows x inputs(), overwritten) of one slot.
  void summary_slot(const ParsedContext& context, int slot, const Chosen& chosen,
                    std::vector<Candidate>& candidates, RowMatrix& rows) const;
  void answer_slot(const ParsedContext& context, int slot, const Chosen& chosen,
                   std::vector<Candidate>& candidates, RowMatrix& rows) const;
  // Index of `token` among the candidates, -1 if absent.
  static int find(const std::vector<Candidate>& candidates, TokenId token);
  // Applies a chosen token to `chosen` (a keep:<i>, KEEP_TASK, or an answer's val: token).
  void choose(const ParsedContext& context, TokenId token, Chosen& chosen) const;

  TokenId next = 0, submit = 0, stop = 0, keep_task = 0, question = 0, unseen = 0;

 private:
  void fill_row(const ParsedContext& context, const Candidate& c, int slot, const Chosen& chosen,
                RowMatrix& rows, int r) const;
  std::shared_ptr<const RawFeaturizer> raw_;  // set: the raw view fills the slots
  // Per-id lookups (-1 when the id is not of that class).
  std::vector<int> rec_of_, keep_of_, kind_of_, key_of_, type_of_;
  std::vector<TokenId> keep_token_;  // record index -> keep:<i>
  std::vector<bool> is_value_;
  int records_ = 0, kinds_ = 0, keys_ = 0, types_ = 0, ordered_plan_ = -1;
  // Feature offsets.
  int f_class_ = 0, f_kind_ = 0, f_key_ = 0, f_pos_ = 0, f_pos_scalar_ = 0, f_match_ = 0, f_latest_key_ = 0,
      f_latest_kind_ = 0, f_after_ = 0, f_type_ = 0, f_slot_ = 0, f_count_ = 0, f_task_kept_ = 0, f_bias_ = 0,
      inputs_ = 0;
};

}  // namespace crl::neural
