#include "server/gateway/template_kwargs.h"

#include <optional>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "server/gateway/gateway_error.h"

namespace crl::server::gateway {

namespace {
constexpr size_t kMaxVerdicts = 256;
}  // namespace

std::string TemplateKwargsCheck::verdict(const std::string& kwargs) const {
  if (!chat_.jinja) return "";  // the built-in templates read no variables
  ChatRenderRequest probe;
  probe.messages = nlohmann::ordered_json::array({{{"role", "system"}, {"content", "CRLPROBESYSTEM"}},
                                                  {{"role", "user"}, {"content", "CRLPROBEUSER"}},
                                                  {{"role", "assistant"}, {"content", "CRLPROBEANSWER"}},
                                                  {{"role", "user"}, {"content", "CRLPROBEUSERTWO"}}});
  probe.add_generation_prompt = true;
  probe.now_unix = 0;
  std::string plain, with;
  try {
    plain = chat_.render(probe);
    probe.extra = nlohmann::ordered_json::parse(kwargs);
    with = chat_.render(probe);
  } catch (const std::exception& e) {
    return std::string("the template refuses them: ") + e.what();
  }
  if (with == plain) return "";
  return "they change what the template writes (" + quote(text_prefix(kwargs, 120)) +
         "): a session renders every call with the variables it started with (its first call's "
         "chat_template_kwargs, over the server's --default-chat-template-kwargs), so that its windows "
         "extend each other; send the same ones (or none), or start a new session with these";
}

std::string TemplateKwargsCheck::kept_verdict(const std::string& kwargs) const {
  if (kwargs.empty()) return "";
  if (kwargs.size() > kMaxKeptKwargsBytes) return verdict(kwargs);
  std::optional<std::string> why;
  {
    std::lock_guard lock(mutex_);
    if (const auto it = verdicts_.find(kwargs); it != verdicts_.end()) why = it->second;
  }
  if (!why) {
    why = verdict(kwargs);  // (outside the lock: two renders)
    std::lock_guard lock(mutex_);
    if (verdicts_.size() >= kMaxVerdicts) verdicts_.clear();
    verdicts_.emplace(kwargs, *why);
  }
  return *why;
}

bool TemplateKwargsCheck::accepts(const std::string& kwargs) const {
  return kept_verdict(kwargs).empty();
}

void TemplateKwargsCheck::check(const std::string& kwargs) const {
  if (const std::string why = kept_verdict(kwargs); !why.empty())
    throw bad_request("unsupported_field", "chat_template_kwargs: " + why, "chat_template_kwargs");
}

void add_reasoning_effort(std::string& kwargs, JsonView effort, const char* field) {
  if (effort.is_none()) return;
  if (!effort.is_string())
    throw bad_request("bad_field", std::string(field) + " must be a string (low, medium, high)", field);
  nlohmann::ordered_json merged =
      kwargs.empty() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(kwargs);
  if (merged.contains("reasoning_effort")) return;  // chat_template_kwargs say it themselves
  merged["reasoning_effort"] = std::string(effort.string());
  kwargs = merged.dump();
}

}  // namespace crl::server::gateway
