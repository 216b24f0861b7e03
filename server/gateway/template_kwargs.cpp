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
         "): the gateway renders every call with the same variables, so that a session's windows extend "
         "each other; start crl serve with --default-chat-template-kwargs " +
         quote(text_prefix(kwargs, 120)) + " (vLLM's option of that name) to render every call with them";
}

void TemplateKwargsCheck::check(const std::string& kwargs) const {
  if (kwargs.empty()) return;
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
  if (!why->empty())
    throw bad_request("unsupported_field", "chat_template_kwargs: " + *why, "chat_template_kwargs");
}

}  // namespace crl::server::gateway
