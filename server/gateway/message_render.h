#pragma once
// Messages -> token ids with the session's tokenizer and chat template (engine/chat_template.h). Only the
// template's own strings become special tokens: message text is ordinary text whatever it holds (the same
// rule as the text codec, envs/codec.cpp), so a harness cannot forge a turn boundary.
//
// The window of a session is written in two ways that must agree token for token:
//  * first_prompt(): the messages of a session's first call (or of a history the harness rewrote), as the
//    system turn (with the tools block appended, Qwen-style) and everything after it;
//  * observation(): what follows a sampled assistant action: the close of the assistant turn when the
//    action did not sample it, then the new messages' turns.
// With a Jinja template (a real model's, `--chat-template PATH/tokenizer_config.json | PATH.jinja`) both
// are cut out of the template's own render of the harness's messages and tools (template_render.h), so the
// forwarded prompt is the template's text; the built-ins (chatml, plain) write the per-turn strings.
// `now_unix` is the time a template's strftime_now() formats (fixed per window, so renders extend each
// other).
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/tokenizer.h"
#include "server/gateway/chat_messages.h"
#include "server/gateway/template_render.h"

namespace crl::server::gateway {

class MessageRenderer {
 public:
  // Throws crl::Error when the tokenizer lacks the template's end-of-turn token. `also_closing`: other ids
  // that close an answer the policy sampled (gpt-oss's <|call|> and <|return|>): no end of turn is written
  // after them. `also_guarded`: TemplateRenderer's.
  MessageRenderer(std::shared_ptr<const Tokenizer> tokenizer, ChatTemplate chat,
                  std::vector<TokenId> also_closing = {}, std::vector<std::string> also_guarded = {});

  // Whether the template is a Jinja template rendered whole (else the built-in per-turn strings).
  bool renders_template() const { return template_ != nullptr; }
  // Throws GatewayError (400 template_error) when a Jinja template refuses the messages.
  // `memo`: the session's messages as a Jinja template's values, kept between its calls (null: none).
  // How the parts end: TemplateRenderer::first's (never opening a turn with the built-ins).
  FirstPrompt first_prompt(std::span<const Message> messages, const nlohmann::ordered_json& tools,
                           int64_t now_unix, std::vector<TokenId>& system, std::vector<TokenId>& rest,
                           ConvertedMessages* memo = nullptr) const;
  // `messages`: the conversation the window holds (the harness's whole list, or after a rebuild the
  // window's conversation: GatewaySession::WindowConversation), messages[answer] the harness's copy of our
  // answer, new messages after it.
  // The ids open the next turn themselves only where a Jinja template writes no generation prompt after
  // the new messages (TemplateRenderer::next).
  TurnsAfterAnswer observation(std::span<const TokenId> action, std::span<const Message> messages,
                               size_t answer, const nlohmann::ordered_json& tools, int64_t now_unix,
                               ConvertedMessages* memo = nullptr) const;
  // The text of a plain-completion prompt (content only: no special tokens).
  std::vector<TokenId> text(std::string_view text) const { return tokenizer_->encode_ordinary(text); }

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::shared_ptr<const Tokenizer>& tokenizer_ptr() const { return tokenizer_; }
  const ChatTemplate& chat() const { return chat_; }
  TokenId end_of_turn() const { return end_of_turn_; }

 private:
  // Appends a message's turn to `pieces`; texts made here live in `held`.
  void add_turn(const Message& message, std::vector<TextPiece>& pieces, std::deque<std::string>& held) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  ChatTemplate chat_;
  std::unique_ptr<TemplateRenderer> template_;  // a Jinja template: its own render
  TokenId end_of_turn_ = 0;
  std::vector<TokenId> closing_;  // end_of_turn_ and also_closing
};

}  // namespace crl::server::gateway
