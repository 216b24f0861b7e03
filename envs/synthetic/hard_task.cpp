#include "envs/synthetic/hard_task.h"

#include <algorithm>

namespace crl::envs::synthetic {

namespace {

constexpr int kFacts = 4;               // FACT records of distinct labels in an early_fact task
constexpr int kFactWindow = 12;         // ... all in records 1-12
constexpr int kLastTrackedWindow = 40;  // latest_update: tracked updates only in records 1-40

std::vector<std::string_view> pool(std::span<const std::string_view> items) {
  return std::vector<std::string_view>(items.begin(), items.end());
}

// Positions 0..n-1 except those in `taken`, shuffled.
std::vector<int> free_positions(SplitMix64& rng, int n, const std::vector<int>& taken) {
  std::vector<int> free;
  for (int i = 0; i < n; ++i) {
    if (std::find(taken.begin(), taken.end(), i) == taken.end()) free.push_back(i);
  }
  rng.shuffle(free);
  return free;
}

void hard_early_fact(SplitMix64& rng, SyntheticTask& t) {
  const int n = static_cast<int>(t.records.size());
  std::vector<std::string_view> labels = pool(fact_labels());
  rng.shuffle(labels);  // labels[0] is the target, labels[1..3] the other FACTs
  t.target = std::string(labels[0]);
  std::vector<std::string_view> codes = pool(code_pool());
  rng.shuffle(codes);  // codes[0..3] the FACTs (codes[0] the answer), then the NOTEs: all distinct
  std::vector<int> early;
  for (int i = 0; i < kFactWindow; ++i) early.push_back(i);
  rng.shuffle(early);
  std::vector<int> facts(early.begin(), early.begin() + kFacts);
  for (int f = 0; f < kFacts; ++f)
    t.records[facts[f]] = {"FACT", std::string(labels[f]), std::string(codes[f]), ""};
  // NOTEs: the first two under the target label and after its FACT (a later code of the same key), the
  // others under a uniform label anywhere.
  const int notes = 12 + static_cast<int>(rng.below32(5));
  std::vector<int> free = free_positions(rng, n, facts);
  std::vector<int> after;
  for (int p : free) {
    if (p > facts[0]) after.push_back(p);
  }
  std::vector<int> used;
  for (int d = 0; d < 2; ++d) {
    t.records[after[d]] = {"NOTE", t.target, std::string(codes[kFacts + d]), ""};
    used.push_back(after[d]);
  }
  int d = 2;
  for (int p : free) {
    if (d == notes) break;
    if (std::find(used.begin(), used.end(), p) != used.end()) continue;
    t.records[p] = {"NOTE",
                    std::string(fact_labels()[rng.below32(static_cast<uint32_t>(fact_labels().size()))]),
                    std::string(codes[kFacts + d]), ""};
    ++d;
  }
}

void hard_latest_update(SplitMix64& rng, SyntheticTask& t) {
  const int n = static_cast<int>(t.records.size());
  const auto keys = update_keys();
  const int target_key = static_cast<int>(rng.below32(static_cast<uint32_t>(keys.size())));
  t.target = std::string(keys[target_key]);
  const int tracked = 5 + static_cast<int>(rng.below32(4));
  const int others = 14 + static_cast<int>(rng.below32(7));
  std::vector<std::string_view> words = pool(update_word_pool());
  rng.shuffle(words);  // distinct values: each value identifies its record
  std::vector<int> window;
  for (int i = 0; i < kLastTrackedWindow; ++i) window.push_back(i);
  rng.shuffle(window);
  std::vector<int> taken(window.begin(), window.begin() + tracked);
  for (int u = 0; u < tracked; ++u) t.records[taken[u]] = {"UPDATE", t.target, std::string(words[u]), ""};
  const std::vector<int> free = free_positions(rng, n, taken);
  for (int u = 0; u < others; ++u) {
    int k = static_cast<int>(rng.below32(static_cast<uint32_t>(keys.size()) - 1));
    if (k >= target_key) ++k;
    t.records[free[u]] = {"UPDATE", std::string(keys[k]), std::string(words[tracked + u]), ""};
  }
}

void hard_ordered_plan(SplitMix64& rng, SyntheticTask& t) {
  const int n = static_cast<int>(t.records.size());
  t.target = "step";
  const int third = n / kPlanLength;
  std::vector<int> m;
  for (int i = 0; i < kPlanLength; ++i) m.push_back(i * third + static_cast<int>(rng.below32(third)));
  std::vector<std::string_view> words = pool(plan_word_pool());
  rng.shuffle(words);
  for (int i = 0; i < kPlanLength; ++i) t.records[m[i]] = {"MILESTONE", "step", std::string(words[i]), ""};
  const std::vector<int> free = free_positions(rng, n, m);
  const int distractors = 9 + static_cast<int>(rng.below32(6));
  for (int d = 0; d < distractors; ++d) {
    const char* kind = rng.below32(2) == 0 ? "DRAFT" : "REJECTED";
    t.records[free[d]] = {kind, "step", std::string(words[kPlanLength + d]), ""};
  }
}

}  // namespace

void layout_hard_task(SplitMix64& rng, SyntheticTask& task) {
  switch (task.type) {
    case TaskType::kEarlyFact:
      hard_early_fact(rng, task);
      break;
    case TaskType::kLatestUpdate:
      hard_latest_update(rng, task);
      break;
    case TaskType::kOrderedPlan:
      hard_ordered_plan(rng, task);
      break;
  }
}

std::string hard_instruction(TaskType type, const std::string& target) {
  const std::string n = std::to_string(kHardRecordsPerTask);
  switch (type) {
    case TaskType::kEarlyFact:
      return "Read the log of " + n +
             " records with `next`, one record per turn. FACT records hold 4-digit codes under several "
             "labels; NOTE records hold other codes that do not matter. After the last record you will be "
             "asked for the code of the FACT record labelled `" +
             target + "`.";
    case TaskType::kLatestUpdate:
      return "Read the log of " + n + " records with `next`, one record per turn. Track the key `" + target +
             "`: UPDATE records change it several times, mixed with updates of other keys. After the last "
             "record you will be asked for its latest value.";
    case TaskType::kOrderedPlan:
      return "Read the log of " + n +
             " records with `next`, one record per turn. Three MILESTONE records name the steps of a plan; "
             "DRAFT and REJECTED records name steps that are not part of it. After the last record you will "
             "be asked for the plan in order.";
  }
  return "";
}

std::string hard_question(TaskType type, const std::string& target) {
  if (type == TaskType::kEarlyFact)
    return "QUESTION: What is the code in the FACT record labelled " + target +
           "? Answer with: submit <code>";
  if (type == TaskType::kLatestUpdate)
    return "QUESTION: What is the latest value of " + target + "? Answer with: submit <value>";
  return "QUESTION: What are the MILESTONE steps in order of appearance? Answer with: submit "
         "{\"plan\":\"first>second>third\"}";
}

std::optional<std::string> derive_hard_answer(const SyntheticTask& task, std::string& answer,
                                              std::vector<int>& milestones) {
  milestones.clear();
  answer.clear();
  for (size_t i = 0; i < task.records.size(); ++i) {
    const Record& r = task.records[i];
    if (r.kind == "FACT" && r.key == task.target) milestones.push_back(static_cast<int>(i));
  }
  if (milestones.size() != 1 || value_domain(task.records[milestones[0]].value) != ValueDomain::kCode) {
    milestones.clear();
    return "a hard early_fact task has exactly one `FACT " + task.target + "=<4-digit code>` record";
  }
  answer = task.records[milestones[0]].value;
  return std::nullopt;
}

}  // namespace crl::envs::synthetic
