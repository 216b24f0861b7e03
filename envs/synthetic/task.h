#pragma once
// Tasks of the synthetic memory suite (spec section 4): what a task is, how it is generated, and how it is
// written to and read from one JSONL line (format in data/README.md).
//
// Generation is a pure function of (namespace, type, index): the task id names all three, the seed is a hash
// of the id, and every draw comes from our own SplitMix64 stream (never std:: distributions, whose output
// differs between standard libraries). So the committed split files regenerate byte for byte anywhere.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace crl::envs::synthetic {

enum class TaskType { kEarlyFact = 0, kLatestUpdate = 1, kOrderedPlan = 2 };
// The fixed interleaving order of the types in split files.
inline constexpr std::array<TaskType, 3> kTaskTypes = {TaskType::kEarlyFact, TaskType::kLatestUpdate,
                                                       TaskType::kOrderedPlan};
std::string_view task_type_name(TaskType type);
std::optional<TaskType> parse_task_type(std::string_view name);

inline constexpr int kRecordsPerTask = 16;      // the default and phase3 namespaces
inline constexpr int kHardRecordsPerTask = 48;  // the hard namespace (hard_task.h)
inline constexpr int kMaxRecordsPerTask = kHardRecordsPerTask;
inline constexpr std::string_view kHardNamespace = "hard";
// Records per task of a namespace (48 for `hard`, 16 otherwise).
int records_per_task(std::string_view name_space);
// The namespace a task id "syn-<namespace>-<type>-<index>" names (empty when the id has no such part).
std::string_view task_namespace(std::string_view task_id);
inline constexpr int kPlanLength = 3;

// One record: a structured triple (the symbolic view) and its text rendering (the text view). The text
// holds the triple verbatim plus a random reference id and filler, about 30-50 tokens.
struct Record {
  std::string kind;   // FACT, NOTE, UPDATE, MILESTONE, DRAFT, REJECTED, LOG
  std::string key;    // code, badge, ..., region, ..., step, status
  std::string value;  // a 4-digit code, an update word, a plan word or a status word
  std::string text;
};

struct SyntheticTask {
  std::string task_id;  // "syn-<namespace>-<type>-<index:04>"
  TaskType type = TaskType::kEarlyFact;
  std::string split;   // train | dev | test
  uint64_t seed = 0;   // task_seed(task_id)
  std::string target;  // the key the question asks about (code, the tracked key, step)
  std::string instruction;
  std::vector<Record> records;  // records_per_task(namespace of the id)
  std::string question;
  std::string answer;
  // 0-based indices of the records the answer is built from, in order: the FACT record, the target key's
  // UPDATE records, or the three MILESTONE records. (1-based in the JSONL file, like the record numbers.)
  std::vector<int> milestones;
};

// The answer domain of a task type: the values that count as "plan tokens" in summary metrics.
enum class ValueDomain { kCode, kUpdateWord, kPlanWord, kStatusWord, kNone };
ValueDomain answer_domain(TaskType type);
// Which domain a value string belongs to (codes: exactly four digits; words: the fixed pools below).
ValueDomain value_domain(std::string_view value);

// The fixed pools (part of the format: changing one changes every generated file).
std::span<const std::string_view> code_pool();         // 64 four-digit codes
std::span<const std::string_view> update_word_pool();  // 40 words
std::span<const std::string_view> plan_word_pool();    // 24 words
std::span<const std::string_view> status_word_pool();  // 6 words
std::span<const std::string_view> fact_labels();       // NOTE keys of early_fact distractors
std::span<const std::string_view> update_keys();       // keys of latest_update
std::span<const std::string_view> record_kinds();

std::string make_task_id(std::string_view name_space, TaskType type, int index);
// u64(SHA-256("syn|" + task_id)) masked to 63 bits, so that it survives signed 64-bit readers.
uint64_t task_seed(std::string_view task_id);

SyntheticTask generate_task(std::string_view name_space, TaskType type, int index, std::string_view split);

// The answer and milestones implied by the records, the type and the target; loading checks that the stored
// ones agree, so a hand-edited or corrupted record is caught. Returns an explanation on failure.
std::optional<std::string> derive_answer(const SyntheticTask& task, std::string& answer,
                                         std::vector<int>& milestones);

// A rough, tokenizer-free token count used to keep records at 30-50 tokens: each run of letters, each digit
// and each punctuation character counts one (about what BPE tokenizers that split digits produce).
int approx_tokens(std::string_view text);

// One JSONL line (no trailing newline). Our own writer, so the bytes depend on nothing outside this repo.
std::string task_to_json(const SyntheticTask& task);
// Parses one line; throws crl::Error naming `where` (file:line), the field and the value.
SyntheticTask task_from_json(std::string_view line, const std::string& where);

}  // namespace crl::envs::synthetic
