#include "server/gateway/message_render.h"

#include <algorithm>

#include "engine/error.h"

namespace crl::server::gateway {

namespace {
ChatRole chat_role(MessageRole role) {
  switch (role) {
    case MessageRole::kSystem:
      return ChatRole::kSystem;
    case MessageRole::kUser:
      return ChatRole::kUser;
    case MessageRole::kAssistant:
      return ChatRole::kAssistant;
    case MessageRole::kTool:
      return ChatRole::kTool;
  }
  return ChatRole::kUser;
}
}  // namespace

MessageRenderer::MessageRenderer(std::shared_ptr<const Tokenizer> tokenizer, ChatTemplate chat,
                                 std::vector<TokenId> also_closing, std::vector<std::string> also_guarded)
    : tokenizer_(std::move(tokenizer)), chat_(std::move(chat)), closing_(std::move(also_closing)) {
  const auto end = tokenizer_->special_token(chat_.end_of_turn);
  if (!end) {
    throw Error("tokenizer " + quote(tokenizer_->name()), "chat template",
                "the " + chat_.name + " template needs the special token " + quote(chat_.end_of_turn));
  }
  end_of_turn_ = *end;
  closing_.push_back(end_of_turn_);
  if (chat_.jinja) {
    std::vector<std::string> also_closing;
    for (size_t i = 0; i + 1 < closing_.size(); ++i)
      also_closing.push_back(tokenizer_->decode({&closing_[i], 1}));
    template_ = std::make_unique<TemplateRenderer>(tokenizer_, chat_, std::move(also_closing),
                                                   std::move(also_guarded));
  }
}

void MessageRenderer::add_turn(const Message& message, std::vector<TextPiece>& pieces,
                               std::deque<std::string>& held) const {
  std::string_view content = message.content;
  if (message.role == MessageRole::kAssistant && !message.tool_calls.empty()) {
    held.push_back(assistant_text(message.content, message.tool_calls));
    content = held.back();
  }
  for (const TextPiece& piece : chat_.turn_pieces(chat_role(message.role), content)) {
    if (!piece.text.empty()) pieces.push_back(piece);
  }
}

FirstPrompt MessageRenderer::first_prompt(std::span<const Message> messages,
                                          const nlohmann::ordered_json& tools, int64_t now_unix,
                                          std::vector<TokenId>& system, std::vector<TokenId>& rest,
                                          ConvertedMessages* memo) const {
  if (template_) return template_->first(messages, tools, now_unix, system, rest, memo);
  std::deque<std::string> held;
  std::deque<Message> made;  // the pieces view their text: alive until the ids are encoded
  std::vector<TextPiece> pieces;
  size_t first = 0;
  const std::string block = tools_system_block(tools);
  if (!messages.empty() && messages[0].role == MessageRole::kSystem) {
    first = 1;
    if (block.empty()) {
      add_turn(messages[0], pieces, held);
    } else {
      made.push_back(messages[0]);
      made.back().content += "\n\n" + block;
      add_turn(made.back(), pieces, held);
    }
  } else if (!block.empty()) {
    made.push_back(Message{MessageRole::kSystem, block, {}, {}});
    add_turn(made.back(), pieces, held);
  }
  system = tokenizer_->encode_pieces(pieces);
  pieces.clear();
  for (size_t i = first; i < messages.size(); ++i) add_turn(messages[i], pieces, held);
  rest = tokenizer_->encode_pieces(pieces);
  return FirstPrompt{};
}

TurnsAfterAnswer MessageRenderer::observation(std::span<const TokenId> action,
                                              std::span<const Message> messages, size_t answer,
                                              const nlohmann::ordered_json& tools, int64_t now_unix,
                                              ConvertedMessages* memo) const {
  std::deque<std::string> held;
  std::vector<TextPiece> pieces;
  const bool closed =
      !action.empty() && std::find(closing_.begin(), closing_.end(), action.back()) != closing_.end();
  if (!closed) pieces.push_back(TextPiece{chat_.end_of_turn, true});
  if (!chat_.after_end_of_turn.empty()) pieces.push_back(TextPiece{chat_.after_end_of_turn, true});
  if (template_) {
    // The window's text of the answer and its close, for a cut with one render (template_render.h).
    std::string answer_text;
    if (memo) {
      answer_text = tokenizer_->decode(action);
      if (!closed) answer_text += chat_.end_of_turn;
      answer_text += chat_.after_end_of_turn;
    }
    if (auto turns = template_->next(messages, answer, tools, now_unix, memo, answer_text)) {
      std::vector<TokenId> out = tokenizer_->encode_pieces(pieces);
      out.insert(out.end(), turns->ids.begin(), turns->ids.end());
      return TurnsAfterAnswer{std::move(out), turns->opens_turn};
    }
    // The template's renders do not extend each other: the new turns with the per-turn strings.
  }
  for (const Message& message : messages.subspan(answer + 1)) add_turn(message, pieces, held);
  return TurnsAfterAnswer{tokenizer_->encode_pieces(pieces), false};
}

}  // namespace crl::server::gateway
