#pragma once
// vLLM's and SGLang's `chat_template_kwargs` on chat completions (extra variables of the chat template, as
// Qwen3's `enable_thinking` or gpt-oss's `reasoning_effort`), checked rather than silently ignored.
//
// A session's windows are renders of the harness's messages that extend each other, made with the
// template's own variables; a call that changed them would need the window rendered again (and the
// template's assistant header no longer opens every answer: Qwen3's `enable_thinking: false` writes an
// empty think block after it). So the gateway accepts kwargs that change nothing the template writes and
// refuses the others with a 400 naming `chat_template_kwargs`: what "changes nothing" means is a probe
// conversation (system, user, assistant, user, with the generation prompt) rendered with and without them.
// `enable_thinking: true` on Qwen3, or a variable the template never reads, passes; `enable_thinking:
// false` does not, and the error says what to do instead (/no_think in the system prompt). The built-in
// templates read no variables, so every kwargs object passes there. Verdicts are kept per distinct kwargs
// text (a harness sends the same object every call), at most 256.
#include <map>
#include <mutex>
#include <string>

#include "engine/chat_template.h"

namespace crl::server::gateway {

class TemplateKwargsCheck {
 public:
  explicit TemplateKwargsCheck(ChatTemplate chat) : chat_(std::move(chat)) {}
  // `kwargs`: the request's chat_template_kwargs object as JSON text (empty: none). Throws GatewayError 400.
  void check(const std::string& kwargs) const;

 private:
  // "" when `kwargs` change nothing the template renders, else why.
  std::string verdict(const std::string& kwargs) const;

  ChatTemplate chat_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::string> verdicts_;
};

}  // namespace crl::server::gateway
