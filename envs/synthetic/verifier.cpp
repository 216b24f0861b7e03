#include "envs/synthetic/verifier.h"

#include <nlohmann/json.hpp>

#include "engine/json_reader.h"

namespace crl::envs::synthetic {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string expected_plan(const SyntheticTask& task) {
  std::string plan;
  for (int index : task.milestones) plan += (plan.empty() ? "" : ">") + task.records[index].value;
  return plan;
}

}  // namespace

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

bool verify_answer(const SyntheticTask& task, std::string_view submitted) {
  const std::string_view answer = trim(submitted);
  if (task.type != TaskType::kOrderedPlan) return answer == task.answer;
  // The shared reader refuses a repeated key ({"plan":"a","plan":"b"} is not one answer), deep nesting and
  // numbers out of range (which nlohmann's own parse threw even with exceptions off).
  nlohmann::json parsed;
  try {
    parsed = read_json(answer, "answer");
  } catch (const JsonError&) {
    return false;
  }
  if (!parsed.is_object() || parsed.size() != 1) return false;
  auto it = parsed.find("plan");
  if (it == parsed.end() || !it->is_string()) return false;
  return it->get<std::string>() == expected_plan(task);
}

}  // namespace crl::envs::synthetic
