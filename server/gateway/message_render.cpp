#include "server/gateway/message_render.h"

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

MessageRenderer::MessageRenderer(std::shared_ptr<const Tokenizer> tokenizer, ChatTemplate chat)
    : tokenizer_(std::move(tokenizer)), chat_(std::move(chat)) {
  const auto end = tokenizer_->special_token(chat_.end_of_turn);
  if (!end) {
    throw Error("tokenizer " + quote(tokenizer_->name()), "chat template",
                "the " + chat_.name + " template needs the special token " + quote(chat_.end_of_turn));
  }
  end_of_turn_ = *end;
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

void MessageRenderer::first_prompt(std::span<const Message> messages, const nlohmann::json& tools,
                                   std::vector<TokenId>& system, std::vector<TokenId>& rest) const {
  std::deque<std::string> held;
  std::vector<TextPiece> pieces;
  size_t first = 0;
  const std::string block = tools_system_block(tools);
  if (!messages.empty() && messages[0].role == MessageRole::kSystem) {
    first = 1;
    if (block.empty()) {
      add_turn(messages[0], pieces, held);
    } else {
      Message with_tools = messages[0];
      with_tools.content += "\n\n" + block;
      add_turn(with_tools, pieces, held);
    }
  } else if (!block.empty()) {
    add_turn(Message{MessageRole::kSystem, block, {}, {}}, pieces, held);
  }
  system = tokenizer_->encode_pieces(pieces);
  pieces.clear();
  for (size_t i = first; i < messages.size(); ++i) add_turn(messages[i], pieces, held);
  rest = tokenizer_->encode_pieces(pieces);
}

std::vector<TokenId> MessageRenderer::observation(std::span<const TokenId> action,
                                                  std::span<const Message> messages) const {
  std::deque<std::string> held;
  std::vector<TextPiece> pieces;
  const bool closed = !action.empty() && action.back() == end_of_turn_;
  if (!closed) pieces.push_back(TextPiece{chat_.end_of_turn, true});
  if (!chat_.after_end_of_turn.empty()) pieces.push_back(TextPiece{chat_.after_end_of_turn, true});
  for (const Message& message : messages) add_turn(message, pieces, held);
  return tokenizer_->encode_pieces(pieces);
}

}  // namespace crl::server::gateway
