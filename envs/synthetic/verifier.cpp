#include "envs/synthetic/verifier.h"

#include <nlohmann/json.hpp>

namespace crl::envs::synthetic {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Counts object keys while parsing, so that {"plan":"x","plan":"a>b>c"} (which a plain parse collapses to
// one key) is rejected: the answer must be exactly one key.
class KeyCounter : public nlohmann::json_sax<nlohmann::json> {
 public:
  int keys = 0;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override {
    ++keys;
    return true;
  }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

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
  const nlohmann::json parsed = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object() || parsed.size() != 1) return false;
  auto it = parsed.find("plan");
  if (it == parsed.end() || !it->is_string()) return false;
  KeyCounter counter;
  if (!nlohmann::json::sax_parse(answer, &counter) || counter.keys != 1) return false;
  return it->get<std::string>() == expected_plan(task);
}

}  // namespace crl::envs::synthetic
