#include "envs/synthetic/task.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "engine/sha256.h"
#include "engine/splitmix.h"
#include "envs/synthetic/hard_task.h"

namespace crl::envs::synthetic {

namespace {

// ---- Fixed pools. The value pools are disjoint, so a value names its domain (and, inside a task, where all
// values are distinct, its record). Filler words avoid every pool word, kind and key, so filler never looks
// like a value to the summary metrics. ----
constexpr std::string_view kCodes[] = {
    "1041", "1188", "1405", "1415", "1800", "2250", "2322", "2469", "2485", "2606", "2680", "2681", "2814",
    "2907", "2951", "3113", "3308", "3333", "4444", "4658", "4678", "4931", "5120", "5237", "5706", "5712",
    "5786", "6062", "6148", "6234", "6577", "6696", "6843", "6956", "7043", "7166", "7508", "7523", "7533",
    "7880", "7891", "7917", "7970", "8035", "8226", "8367", "8494", "8554", "8701", "8851", "9032", "9042",
    "9045", "9166", "9233", "9296", "9385", "9404", "9414", "9486", "9572", "9595", "9815", "9975"};
constexpr std::string_view kUpdateWords[] = {
    "amber",  "birch",  "cedar",  "cobalt", "coral",   "crimson", "delta",   "ember",  "fern",   "flint",
    "garnet", "harbor", "hazel",  "indigo", "ivory",   "jade",    "juniper", "lagoon", "lilac",  "maple",
    "marble", "meadow", "onyx",   "opal",   "orchid",  "pebble",  "pine",    "quartz", "raven",  "saffron",
    "sage",   "slate",  "spruce", "teal",   "thistle", "topaz",   "tundra",  "umber",  "willow", "zephyr"};
constexpr std::string_view kPlanWords[] = {
    "audit",   "backup",  "calibrate", "compile", "deploy",   "document", "encrypt",  "export",
    "index",   "inspect", "install",   "migrate", "monitor",  "package",  "patch",    "profile",
    "rebuild", "release", "restore",   "review",  "sanitize", "schedule", "validate", "verify"};
constexpr std::string_view kStatusWords[] = {"ok", "idle", "busy", "queued", "paused", "done"};
constexpr std::string_view kFactLabels[] = {"badge", "locker", "door", "vault", "ticket", "gate"};
constexpr std::string_view kUpdateKeys[] = {"region", "owner", "mode", "tier", "channel", "shelf"};
constexpr std::string_view kKinds[] = {"FACT", "NOTE", "UPDATE", "MILESTONE", "DRAFT", "REJECTED", "LOG"};
constexpr std::string_view kFiller[] = {
    "entry",   "logged",   "by",       "night",    "shift",   "queue",     "normal", "no",         "action",
    "needed",  "archived", "after",    "sync",     "batch",   "ledger",    "copied", "from",       "upstream",
    "report",  "checked",  "twice",    "pending",  "sign",    "off",       "minor",  "formatting", "noted",
    "weekly",  "handover", "operator", "console",  "mirror",  "cache",     "warm",   "rotation",   "nominal",
    "reading", "within",   "bounds",   "retained", "for",     "reference", "only",   "see",        "attached",
    "team",    "north",    "wing",     "east",     "cluster", "rack",      "remote", "local",      "the"};
constexpr std::string_view kLetters = "abcdefghijklmnopqrstuvwxyz";

using crl::SplitMix64;  // engine/splitmix.h: the generator the committed split files are pinned to

template <typename T, size_t N>
std::vector<T> to_vector(const T (&items)[N]) {
  return std::vector<T>(items, items + N);
}

bool contains(std::span<const std::string_view> pool, std::string_view value) {
  return std::find(pool.begin(), pool.end(), value) != pool.end();
}

// "#05/16 ref k7q2x9 | UPDATE region=cobalt | <filler>." The reference id alternates letters and digits so it
// can never equal a word or a four-digit code; the filler pads to a drawn target of 32-46 tokens.
std::string render_record(SplitMix64& rng, int position, int records, const Record& r) {
  char header[32];
  std::snprintf(header, sizeof header, "#%02d/%02d ref ", position + 1, records);
  std::string text = header;
  for (int i = 0; i < 3; ++i) {
    text += kLetters[rng.below32(26)];
    text += static_cast<char>('0' + rng.below32(10));
  }
  text += " | " + r.kind + " " + r.key + "=" + r.value + " |";
  const int target = 32 + static_cast<int>(rng.below32(15));
  int tokens = approx_tokens(text) + 1;  // + the final period
  while (tokens < target) {
    text += ' ';
    text += kFiller[rng.below32(static_cast<uint32_t>(std::size(kFiller)))];
    ++tokens;
  }
  text += '.';
  return text;
}

std::string instruction_for(TaskType type, const std::string& target) {
  switch (type) {
    case TaskType::kEarlyFact:
      return "Read the log with `next`, one record per turn. Record 1 is a FACT record holding a 4-digit "
             "code; "
             "the NOTE records hold other codes that do not matter. After the last record you will be asked "
             "for the FACT code.";
    case TaskType::kLatestUpdate:
      return "Read the log with `next`, one record per turn. Track the key `" + target +
             "`: UPDATE records change it several times, mixed with updates of other keys. After the last "
             "record you will be asked for its latest value.";
    case TaskType::kOrderedPlan:
      return "Read the log with `next`, one record per turn. Three MILESTONE records name the steps of a "
             "plan; "
             "DRAFT and REJECTED records name steps that are not part of it. After the last record you will "
             "be asked for the plan in order.";
  }
  return "";
}

std::string question_for(TaskType type, const std::string& target) {
  switch (type) {
    case TaskType::kEarlyFact:
      return "QUESTION: What is the code in the FACT record? Answer with: submit <code>";
    case TaskType::kLatestUpdate:
      return "QUESTION: What is the latest value of " + target + "? Answer with: submit <value>";
    case TaskType::kOrderedPlan:
      return "QUESTION: What are the MILESTONE steps in order of appearance? Answer with: submit "
             "{\"plan\":\"first>second>third\"}";
  }
  return "";
}

void layout_early_fact(SplitMix64& rng, SyntheticTask& t) {
  t.target = "code";
  std::vector<std::string_view> codes = to_vector(kCodes);
  rng.shuffle(codes);  // codes[0] is the answer, the next ones the distractors: all distinct
  t.records[0] = {"FACT", "code", std::string(codes[0]), ""};
  const int distractors = 6 + static_cast<int>(rng.below32(5));
  std::vector<int> positions;
  for (int i = 1; i < kRecordsPerTask; ++i) positions.push_back(i);
  rng.shuffle(positions);
  for (int d = 0; d < distractors; ++d) {
    t.records[positions[d]] = {"NOTE", std::string(kFactLabels[rng.below32(std::size(kFactLabels))]),
                               std::string(codes[1 + d]), ""};
  }
}

void layout_latest_update(SplitMix64& rng, SyntheticTask& t) {
  const int target_key = static_cast<int>(rng.below32(std::size(kUpdateKeys)));
  t.target = std::string(kUpdateKeys[target_key]);
  const int target_updates = 3 + static_cast<int>(rng.below32(3));
  const int other_updates = 4 + static_cast<int>(rng.below32(5));
  std::vector<int> positions;
  for (int i = 0; i < kRecordsPerTask; ++i) positions.push_back(i);
  rng.shuffle(positions);
  std::vector<std::string_view> words = to_vector(kUpdateWords);
  rng.shuffle(words);  // distinct values: each value identifies its record
  for (int u = 0; u < target_updates + other_updates; ++u) {
    std::string key = t.target;
    if (u >= target_updates) {
      // One of the five other keys, uniformly.
      int k = static_cast<int>(rng.below32(std::size(kUpdateKeys) - 1));
      if (k >= target_key) ++k;
      key = std::string(kUpdateKeys[k]);
    }
    t.records[positions[u]] = {"UPDATE", key, std::string(words[u]), ""};
  }
}

void layout_ordered_plan(SplitMix64& rng, SyntheticTask& t) {
  t.target = "step";
  // One milestone in each part of the episode (records 1-5, 6-11, 12-16), so the plan must survive the
  // compactions in between.
  const int m[kPlanLength] = {static_cast<int>(rng.below32(5)), 5 + static_cast<int>(rng.below32(6)),
                              11 + static_cast<int>(rng.below32(5))};
  std::vector<std::string_view> words = to_vector(kPlanWords);
  rng.shuffle(words);
  for (int i = 0; i < kPlanLength; ++i) t.records[m[i]] = {"MILESTONE", "step", std::string(words[i]), ""};
  std::vector<int> free;
  for (int i = 0; i < kRecordsPerTask; ++i) {
    if (i != m[0] && i != m[1] && i != m[2]) free.push_back(i);
  }
  rng.shuffle(free);
  const int distractors = 3 + static_cast<int>(rng.below32(4));
  for (int d = 0; d < distractors; ++d) {
    const char* kind = rng.below32(2) == 0 ? "DRAFT" : "REJECTED";
    t.records[free[d]] = {kind, "step", std::string(words[kPlanLength + d]), ""};
  }
}

std::string plan_answer(const std::vector<std::string>& steps) {
  std::string plan;
  for (const std::string& s : steps) plan += (plan.empty() ? "" : ">") + s;
  return "{\"plan\":\"" + plan + "\"}";
}

// JSON string escaping for our writer. Generated text is ASCII; anything else is escaped so any input
// round-trips.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

std::string_view task_type_name(TaskType type) {
  switch (type) {
    case TaskType::kEarlyFact:
      return "early_fact";
    case TaskType::kLatestUpdate:
      return "latest_update";
    case TaskType::kOrderedPlan:
      return "ordered_plan";
  }
  return "?";
}

std::optional<TaskType> parse_task_type(std::string_view name) {
  for (TaskType t : kTaskTypes) {
    if (task_type_name(t) == name) return t;
  }
  return std::nullopt;
}

std::span<const std::string_view> code_pool() {
  return kCodes;
}
std::span<const std::string_view> update_word_pool() {
  return kUpdateWords;
}
std::span<const std::string_view> plan_word_pool() {
  return kPlanWords;
}
std::span<const std::string_view> status_word_pool() {
  return kStatusWords;
}
std::span<const std::string_view> fact_labels() {
  return kFactLabels;
}
std::span<const std::string_view> update_keys() {
  return kUpdateKeys;
}
std::span<const std::string_view> record_kinds() {
  return kKinds;
}

ValueDomain answer_domain(TaskType type) {
  switch (type) {
    case TaskType::kEarlyFact:
      return ValueDomain::kCode;
    case TaskType::kLatestUpdate:
      return ValueDomain::kUpdateWord;
    case TaskType::kOrderedPlan:
      return ValueDomain::kPlanWord;
  }
  return ValueDomain::kNone;
}

ValueDomain value_domain(std::string_view value) {
  if (value.size() == 4 &&
      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return ValueDomain::kCode;
  }
  if (contains(kUpdateWords, value)) return ValueDomain::kUpdateWord;
  if (contains(kPlanWords, value)) return ValueDomain::kPlanWord;
  if (contains(kStatusWords, value)) return ValueDomain::kStatusWord;
  return ValueDomain::kNone;
}

int records_per_task(std::string_view name_space) {
  return name_space == kHardNamespace ? kHardRecordsPerTask : kRecordsPerTask;
}

std::string_view task_namespace(std::string_view task_id) {
  if (!task_id.starts_with("syn-")) return {};
  const std::string_view rest = task_id.substr(4);
  return rest.substr(0, std::min(rest.find('-'), rest.size()));
}

std::string make_task_id(std::string_view name_space, TaskType type, int index) {
  char number[16];
  std::snprintf(number, sizeof number, "%04d", index);
  return "syn-" + std::string(name_space) + "-" + std::string(task_type_name(type)) + "-" + number;
}

uint64_t task_seed(std::string_view task_id) {
  return sha256_u64("syn|" + std::string(task_id)) & 0x7FFFFFFFFFFFFFFFull;
}

int approx_tokens(std::string_view text) {
  int tokens = 0;
  bool in_letters = false;
  for (const char c : text) {
    const bool letter = std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (letter) {
      if (!in_letters) ++tokens;
    } else if (c != ' ' && c != '\n' && c != '\t') {
      ++tokens;  // a digit or a punctuation character
    }
    in_letters = letter;
  }
  return tokens;
}

SyntheticTask generate_task(std::string_view name_space, TaskType type, int index, std::string_view split) {
  SyntheticTask t;
  t.task_id = make_task_id(name_space, type, index);
  t.type = type;
  t.split = std::string(split);
  t.seed = task_seed(t.task_id);
  SplitMix64 rng(t.seed);
  // Every record starts as noise; the layout overwrites the ones that matter.
  const bool hard = name_space == kHardNamespace;
  const int records = records_per_task(name_space);
  t.records.assign(records, Record{});
  for (Record& r : t.records)
    r = {"LOG", "status", std::string(kStatusWords[rng.below32(std::size(kStatusWords))]), ""};
  if (hard) {
    layout_hard_task(rng, t);
  } else if (type == TaskType::kEarlyFact) {
    layout_early_fact(rng, t);
  } else if (type == TaskType::kLatestUpdate) {
    layout_latest_update(rng, t);
  } else {
    layout_ordered_plan(rng, t);
  }
  for (int i = 0; i < records; ++i) t.records[i].text = render_record(rng, i, records, t.records[i]);
  t.instruction = hard ? hard_instruction(type, t.target) : instruction_for(type, t.target);
  t.question = hard ? hard_question(type, t.target) : question_for(type, t.target);
  const auto problem = derive_answer(t, t.answer, t.milestones);
  CRL_CHECK(!problem, "generated task " << t.task_id << " is inconsistent: " << *problem);
  return t;
}

std::optional<std::string> derive_answer(const SyntheticTask& task, std::string& answer,
                                         std::vector<int>& milestones) {
  milestones.clear();
  answer.clear();
  const std::string_view name_space = task_namespace(task.task_id);
  const int records = records_per_task(name_space);
  if (task.records.size() != static_cast<size_t>(records))
    return "a task of namespace " + quote(name_space) + " has " + std::to_string(records) + " records";
  if (name_space == kHardNamespace && task.type == TaskType::kEarlyFact)
    return derive_hard_answer(task, answer, milestones);
  switch (task.type) {
    case TaskType::kEarlyFact: {
      const Record& first = task.records[0];
      if (first.kind != "FACT" || first.key != task.target ||
          value_domain(first.value) != ValueDomain::kCode) {
        return "record 1 of an early_fact task must be `FACT " + task.target + "=<4-digit code>`";
      }
      for (size_t i = 1; i < task.records.size(); ++i) {
        if (task.records[i].kind == "FACT") return "only record 1 may be a FACT record";
      }
      milestones = {0};
      answer = first.value;
      return std::nullopt;
    }
    case TaskType::kLatestUpdate: {
      for (int i = 0; i < records; ++i) {
        const Record& r = task.records[i];
        if (r.kind == "UPDATE" && r.key == task.target) milestones.push_back(i);
      }
      if (milestones.empty()) return "no UPDATE record for the target key " + quote(task.target);
      answer = task.records[milestones.back()].value;
      return std::nullopt;
    }
    case TaskType::kOrderedPlan: {
      std::vector<std::string> steps;
      for (int i = 0; i < records; ++i) {
        if (task.records[i].kind == "MILESTONE") {
          milestones.push_back(i);
          steps.push_back(task.records[i].value);
        }
      }
      if (steps.size() != static_cast<size_t>(kPlanLength))
        return "an ordered_plan task has 3 MILESTONE records";
      answer = plan_answer(steps);
      return std::nullopt;
    }
  }
  return "unknown type";
}

std::string task_to_json(const SyntheticTask& t) {
  std::string out;
  out.reserve(4096);
  out += "{\"task_id\":";
  append_json_string(out, t.task_id);
  out += ",\"type\":";
  append_json_string(out, task_type_name(t.type));
  out += ",\"split\":";
  append_json_string(out, t.split);
  out += ",\"seed\":" + std::to_string(t.seed);
  out += ",\"target\":";
  append_json_string(out, t.target);
  out += ",\"instruction\":";
  append_json_string(out, t.instruction);
  out += ",\"records\":[";
  for (size_t i = 0; i < t.records.size(); ++i) {
    const Record& r = t.records[i];
    out += i == 0 ? "{\"kind\":" : ",{\"kind\":";
    append_json_string(out, r.kind);
    out += ",\"key\":";
    append_json_string(out, r.key);
    out += ",\"value\":";
    append_json_string(out, r.value);
    out += ",\"text\":";
    append_json_string(out, r.text);
    out += '}';
  }
  out += "],\"question\":";
  append_json_string(out, t.question);
  out += ",\"answer\":";
  append_json_string(out, t.answer);
  out += ",\"milestones\":[";
  for (size_t i = 0; i < t.milestones.size(); ++i)
    out += (i ? "," : "") + std::to_string(t.milestones[i] + 1);
  out += "]}";
  return out;
}

namespace {

using nlohmann::json;

const json& field(const json& object, const char* name, json::value_t type, const std::string& where) {
  auto it = object.find(name);
  if (it == object.end()) throw Error(where, name, "missing");
  const bool ok = it->type() == type || (type == json::value_t::number_unsigned && it->is_number_unsigned());
  if (!ok)
    throw Error(where, name,
                "has JSON type " + std::string(it->type_name()) + ", expected " + json(type).type_name());
  return *it;
}

std::string string_field(const json& object, const char* name, const std::string& where) {
  return field(object, name, json::value_t::string, where).get<std::string>();
}

void exact_keys(const json& object, std::initializer_list<const char*> keys, const std::string& where) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (std::find_if(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; }) == keys.end()) {
      throw Error(where, text_prefix(it.key()), "unknown field");
    }
  }
}

}  // namespace

SyntheticTask task_from_json(std::string_view line, const std::string& where) {
  // The shared reader (engine/json_reader.h): depth limit, duplicate keys, short syntax errors.
  json j;
  try {
    j = read_json(line, where);
  } catch (const JsonError& e) {
    if (e.kind() != JsonErrorKind::kSyntax) throw;
    throw Error(where, "", e.message() + " (truncated or corrupt line?)");
  }
  if (!j.is_object()) throw Error(where, "", "expected a JSON object, found " + std::string(j.type_name()));
  exact_keys(j,
             {"task_id", "type", "split", "seed", "target", "instruction", "records", "question", "answer",
              "milestones"},
             where);
  SyntheticTask t;
  t.task_id = string_field(j, "task_id", where);
  if (t.task_id.rfind("syn-", 0) != 0)
    throw Error(where, "task_id", "value " + quote(t.task_id) + " does not start with \"syn-\"");
  const std::string type = string_field(j, "type", where);
  const auto parsed_type = parse_task_type(type);
  if (!parsed_type)
    throw Error(where, "type", "value " + quote(type) + " is not early_fact, latest_update or ordered_plan");
  t.type = *parsed_type;
  t.split = string_field(j, "split", where);
  if (t.split != "train" && t.split != "dev" && t.split != "test") {
    throw Error(where, "split", "value " + quote(t.split) + " is not train, dev or test");
  }
  t.seed = field(j, "seed", json::value_t::number_unsigned, where).get<uint64_t>();
  if (t.seed != task_seed(t.task_id)) {
    throw Error(where, "seed",
                "value " + std::to_string(t.seed) + " is not the seed of " + quote(t.task_id) +
                    " (expected " + std::to_string(task_seed(t.task_id)) + ")");
  }
  t.target = string_field(j, "target", where);
  t.instruction = string_field(j, "instruction", where);
  const json& records = field(j, "records", json::value_t::array, where);
  const int expected_records = records_per_task(task_namespace(t.task_id));
  if (records.size() != static_cast<size_t>(expected_records)) {
    throw Error(
        where, "records",
        "has " + std::to_string(records.size()) + " records, expected " + std::to_string(expected_records));
  }
  for (size_t i = 0; i < records.size(); ++i) {
    const json& r = records[i];
    const std::string name = "records[" + std::to_string(i) + "]";
    if (!r.is_object()) throw Error(where, name, "expected an object");
    try {
      exact_keys(r, {"kind", "key", "value", "text"}, where);
      Record rec{string_field(r, "kind", where), string_field(r, "key", where),
                 string_field(r, "value", where), string_field(r, "text", where)};
      if (!contains(kKinds, rec.kind))
        throw Error(where, "kind", "value " + quote(rec.kind) + " is not a record kind");
      t.records.push_back(std::move(rec));
    } catch (const Error& e) {
      throw Error(where, name + "." + e.field(), e.message());
    }
  }
  t.question = string_field(j, "question", where);
  t.answer = string_field(j, "answer", where);
  const json& milestones = field(j, "milestones", json::value_t::array, where);
  std::vector<int> stored;
  for (const json& m : milestones) {
    if (!m.is_number_unsigned())
      throw Error(where, "milestones",
                  "expected record numbers (1-" + std::to_string(expected_records) + ")");
    stored.push_back(m.get<int>() - 1);
  }
  std::string answer;
  std::vector<int> derived;
  if (const auto problem = derive_answer(t, answer, derived)) throw Error(where, "records", *problem);
  if (answer != t.answer) {
    throw Error(where, "answer",
                "value " + quote(t.answer) + " disagrees with the records (expected " + quote(answer) + ")");
  }
  if (stored != derived) throw Error(where, "milestones", "disagree with the records");
  t.milestones = std::move(derived);
  return t;
}

}  // namespace crl::envs::synthetic
