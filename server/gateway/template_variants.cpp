#include "server/gateway/template_variants.h"

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "server/gateway/gateway_error.h"

namespace crl::server::gateway {

namespace {
// The template as written when no system turn opened the first user turn (the resume opens its own).
ChatTemplate with_own_user_turns(ChatTemplate chat) {
  chat.system_opens_user_turn = false;
  return chat;
}
}  // namespace

TemplateVariant::TemplateVariant(std::shared_ptr<const Tokenizer> tokenizer, const ChatTemplate& chat,
                                 const std::vector<TokenId>& answer_ends,
                                 const std::vector<std::string>& guarded,
                                 const std::optional<HarmonyTokens>& harmony, std::string kwargs_text)
    : kwargs(std::move(kwargs_text)),
      renderer(tokenizer, chat, answer_ends, guarded),
      codec(
          make_harness_codec(make_text_codec(tokenizer, TextPrompts{}, with_own_user_turns(chat)), harmony)),
      codec_after_opened_turn(
          chat.system_opens_user_turn
              ? make_harness_codec(make_text_codec(tokenizer, TextPrompts{}, chat), harmony)
              : codec),
      check(chat) {}

TemplateVariants::TemplateVariants(std::shared_ptr<const Tokenizer> tokenizer, ChatTemplate chat,
                                   std::vector<TokenId> answer_ends, std::vector<std::string> guarded,
                                   std::optional<HarmonyTokens> harmony)
    : tokenizer_(std::move(tokenizer)),
      chat_(std::move(chat)),
      answer_ends_(std::move(answer_ends)),
      guarded_(std::move(guarded)),
      harmony_(std::move(harmony)),
      base_(
          std::make_shared<const TemplateVariant>(tokenizer_, chat_, answer_ends_, guarded_, harmony_, "")) {}

std::shared_ptr<const TemplateVariant> TemplateVariants::for_session(const std::string& kwargs) {
  if (kwargs.empty() || base_->check.accepts(kwargs)) return base_;
  const auto refuse = [&](const std::string& why) {
    return bad_request("unsupported_field",
                       "chat_template_kwargs " + quote(text_prefix(kwargs, 120)) + ": " + why,
                       "chat_template_kwargs");
  };
  nlohmann::ordered_json own;
  try {
    own = nlohmann::ordered_json::parse(kwargs);
  } catch (const nlohmann::json::exception&) {
    throw refuse("not JSON");  // (the codecs pass an object's text only)
  }
  if (!own.is_object()) throw refuse("must be an object of the template's variables");
  const std::string key = own.dump();
  {
    std::lock_guard lock(mutex_);
    if (const auto it = variants_.find(key); it != variants_.end()) return it->second;
  }
  // The server's variables, then the session's over them.
  const std::string server = template_variables(chat_);
  nlohmann::ordered_json merged =
      server.empty() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(server);
  for (const auto& [name, value] : own.items()) merged[name] = value;
  std::shared_ptr<const TemplateVariant> variant;
  try {
    const ChatTemplate chat = with_template_variables(chat_, merged.dump(), "chat_template_kwargs");
    if (!chat.turns_error.empty())
      throw refuse("the template cannot be cut into turns with them: " + chat.turns_error);
    variant =
        std::make_shared<const TemplateVariant>(tokenizer_, chat, answer_ends_, guarded_, harmony_, key);
  } catch (const GatewayError&) {
    throw;
  } catch (const Error& e) {
    throw refuse(e.message());
  }
  if (key.size() > kMaxKeptKwargsBytes) return variant;  // (not kept for other sessions: see the header)
  std::lock_guard lock(mutex_);
  if (variants_.size() >= kMaxVariants) variants_.clear();  // (sessions keep theirs)
  return variants_.emplace(key, std::move(variant)).first->second;
}

}  // namespace crl::server::gateway
