#pragma once
// vLLM's and SGLang's `chat_template_kwargs` on chat completions (extra variables of the chat template, as
// Qwen3's `enable_thinking` or gpt-oss's `reasoning_effort`), checked rather than silently ignored.
//
// A session's windows are renders of the harness's messages that extend each other, all made with the
// same variables: the template's own, the server's `--default-chat-template-kwargs` (vLLM's option,
// engine/chat_template.h with_template_variables) and the kwargs the session started with
// (template_variants.h: Qwen3's `enable_thinking: false` on a session's first call runs the whole session
// without thinking). A later call's kwargs that would change what the template writes with those
// (rendered through a probe conversation, system, user, assistant, user, with the generation prompt, with
// and without them) are refused with a 400 naming `chat_template_kwargs`; kwargs that change nothing pass:
// the session's own again, `enable_thinking: true` on Qwen3 started without kwargs, a variable the
// template never reads. The built-in templates read no variables, so every kwargs object passes there.
// Verdicts are kept per distinct kwargs text (a harness sends the same object every call), at most 256 of at
// most 4 KiB each (longer ones are judged on every call).
#include <map>
#include <mutex>
#include <string>

#include "engine/chat_template.h"
#include "engine/json_view.h"

namespace crl::server::gateway {

// Kwargs texts longer than this are not kept between calls (a verdict is judged again, a session's variant
// is its own): 256 kept texts of the 8 MiB a request may be would hold 2 GiB; a harness's are tens of bytes.
inline constexpr size_t kMaxKeptKwargsBytes = 4096;

class TemplateKwargsCheck {
 public:
  explicit TemplateKwargsCheck(ChatTemplate chat) : chat_(std::move(chat)) {}
  // `kwargs`: the request's chat_template_kwargs object as JSON text (empty: none). Throws GatewayError 400.
  void check(const std::string& kwargs) const;
  // Whether `kwargs` change nothing the template renders (empty: none, which change nothing).
  bool accepts(const std::string& kwargs) const;

 private:
  // verdict(), kept per distinct text.
  std::string kept_verdict(const std::string& kwargs) const;
  // "" when `kwargs` change nothing the template renders, else why.
  std::string verdict(const std::string& kwargs) const;

  ChatTemplate chat_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::string> verdicts_;
};

// A request's reasoning effort (chat's top-level `reasoning_effort`, Responses' `reasoning.effort`: Codex
// sends it) as the template variable `reasoning_effort` that gpt-oss's template reads, as vLLM gives it to
// the template, added to `kwargs` (chat_template_kwargs as JSON text) unless they set it themselves. A
// template that reads no such variable renders as before (the kwargs then change nothing). `effort`: the
// field's value (absent or null: nothing added); `field` names it in the 400 for a value that is not a
// string.
void add_reasoning_effort(std::string& kwargs, JsonView effort, const char* field);

}  // namespace crl::server::gateway
