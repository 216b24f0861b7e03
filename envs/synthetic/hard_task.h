#pragma once
// The hard variant of the synthetic suite: the `hard` namespace (data/README.md, "The hard namespace").
//
// Same three task types, same console and verifier, but long and shortcut-free: 48 records per task instead
// of 16, with many distractors of the answer's own kind and key, so that no single feature (a position, a
// kind, a key, "the newest record") names the answer:
//  * early_fact: 4 FACT records with four different labels (badge, locker, ...), all in records 1-12; the
//    question names one label (the task's target). 12-16 NOTE records hold other codes, at least two of them
//    under the target label and later than its FACT, so "a record of the target key" or "the newest record of
//    the key" is wrong; the answer is the FACT of the target label.
//  * latest_update: the tracked key is updated 5-8 times, all in records 1-40 (never in the last 8, which a
//    window of the default budget holds, so the latest value must survive compactions), mixed with 14-20
//    updates of the five other keys, several of them later than the last tracked update.
//  * ordered_plan: 3 MILESTONE steps, one in each third (records 1-16, 17-32, 33-48), and 9-14 DRAFT /
//    REJECTED steps of the same key.
// All other records are LOG noise. The generator draws from the same SplitMix64 stream as the default
// layouts (task.cpp), so tasks are a pure function of their id, and the other namespaces are unchanged.
#include <optional>
#include <string>
#include <vector>

#include "engine/splitmix.h"
#include "envs/synthetic/task.h"

namespace crl::envs::synthetic {

// Fills the answer-bearing records and the distractors of a hard task (records already hold LOG noise),
// and sets its target.
void layout_hard_task(SplitMix64& rng, SyntheticTask& task);
std::string hard_instruction(TaskType type, const std::string& target);
std::string hard_question(TaskType type, const std::string& target);
// derive_answer() of a hard early_fact task: the answer is the one FACT record of the target label (the
// other types follow the default rules, whatever the record count).
std::optional<std::string> derive_hard_answer(const SyntheticTask& task, std::string& answer,
                                              std::vector<int>& milestones);

}  // namespace crl::envs::synthetic
