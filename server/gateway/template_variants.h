#pragma once
// The chat template as a session renders it: with the server's variables (`--default-chat-template-kwargs`)
// and the `chat_template_kwargs` the session started with (its first call's, or POST /v1/sessions'), as
// vLLM renders each request with the kwargs it sends. A harness that sends Qwen3's
// `{"enable_thinking": false}` on every call so gets Qwen3 without thinking from its first call on, with no
// server option; its later calls may send the same kwargs again, or none, but not others (template_kwargs.h:
// its windows must extend each other).
//
// Kwargs that change nothing the server's template writes (Qwen3's `enable_thinking: true`, a variable it
// never reads) give the server's own variant; others a variant of their own: the template with the merged
// variables (engine/chat_template.h with_template_variables), its per-turn strings derived again (the
// episode's assistant header is the generation prompt they give: Qwen3's ends with the empty think block),
// its renderer and codec. Variants are built once per distinct kwargs (compact JSON) and shared by the
// sessions that use them; at most kMaxVariants are kept for new sessions (a session keeps its own).
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/tokenizer.h"
#include "envs/codec.h"
#include "server/gateway/harness_env.h"
#include "server/gateway/message_render.h"
#include "server/gateway/template_kwargs.h"

namespace crl::server::gateway {

struct TemplateVariant {
  TemplateVariant(std::shared_ptr<const Tokenizer> tokenizer, const ChatTemplate& chat,
                  const std::vector<TokenId>& answer_ends, const std::vector<std::string>& guarded,
                  const std::optional<HarmonyTokens>& harmony, std::string kwargs);

  std::string kwargs;  // the session kwargs it renders with, compact JSON ("": the server's own variables)
  MessageRenderer renderer;
  std::shared_ptr<const Codec> codec;  // make_harness_codec over the text codec with this template
  // The codec of a window whose system part opened the first user turn (Gemma with a system message:
  // TemplateRenderer::first): its resume turn continues that turn. `codec` itself when the template never
  // does that; `codec`'s resume opens a user turn of its own.
  std::shared_ptr<const Codec> codec_after_opened_turn;
  TemplateKwargsCheck check;  // a later call's chat_template_kwargs against this variant
};

class TemplateVariants {
 public:
  static constexpr size_t kMaxVariants = 16;  // of kwargs up to kMaxKeptKwargsBytes (template_kwargs.h)

  // `chat`: the server's template (its --default-chat-template-kwargs already set). Throws crl::Error as
  // MessageRenderer does.
  TemplateVariants(std::shared_ptr<const Tokenizer> tokenizer, ChatTemplate chat,
                   std::vector<TokenId> answer_ends, std::vector<std::string> guarded,
                   std::optional<HarmonyTokens> harmony);

  const std::shared_ptr<const TemplateVariant>& base() const { return base_; }
  // The variant a new session whose kwargs are `kwargs` (JSON object text as sent; empty: none) renders
  // with. Throws GatewayError 400 naming chat_template_kwargs when they are not an object, name one of the
  // template's inputs (messages, tools, documents, add_generation_prompt), make the template raise, or leave
  // it without turns the gateway can cut.
  std::shared_ptr<const TemplateVariant> for_session(const std::string& kwargs);

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  ChatTemplate chat_;
  std::vector<TokenId> answer_ends_;
  std::vector<std::string> guarded_;
  std::optional<HarmonyTokens> harmony_;
  std::shared_ptr<const TemplateVariant> base_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const TemplateVariant>> variants_;  // by compact kwargs
};

}  // namespace crl::server::gateway
