#include "engine/chat_template.h"

#include "engine/error.h"

namespace crl {

std::string_view chat_role_name(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem:
      return "system";
    case ChatRole::kUser:
      return "user";
    case ChatRole::kAssistant:
      return "assistant";
    case ChatRole::kTool:
      return "tool";
  }
  return "?";
}

std::string ChatTemplate::turn(ChatRole role, std::string_view content) const {
  switch (role) {
    case ChatRole::kSystem:
      return system_prefix + std::string(content) + system_suffix;
    case ChatRole::kUser:
      return user_prefix + std::string(content) + user_suffix;
    case ChatRole::kTool:
      return tool_prefix + std::string(content) + tool_suffix;
    case ChatRole::kAssistant:
      return assistant_prefix + std::string(content) + end_of_turn + after_end_of_turn;
  }
  return std::string(content);
}

std::array<TextPiece, 4> ChatTemplate::turn_pieces(ChatRole role, std::string_view content) const {
  switch (role) {
    case ChatRole::kSystem:
      return {TextPiece{system_prefix, true}, TextPiece{content}, TextPiece{system_suffix, true},
              TextPiece{}};
    case ChatRole::kUser:
      return {TextPiece{user_prefix, true}, TextPiece{content}, TextPiece{user_suffix, true}, TextPiece{}};
    case ChatRole::kTool:
      return {TextPiece{tool_prefix, true}, TextPiece{content}, TextPiece{tool_suffix, true}, TextPiece{}};
    case ChatRole::kAssistant:
      return {TextPiece{assistant_prefix, true}, TextPiece{content}, TextPiece{end_of_turn, true},
              TextPiece{after_end_of_turn, true}};
  }
  return {TextPiece{content}, TextPiece{}, TextPiece{}, TextPiece{}};
}

std::string ChatTemplate::definition() const {
  // Length-prefixed fields, so that no two templates share a definition.
  std::string out = "chat-template/v1";
  for (const std::string* field :
       {&name, &system_prefix, &system_suffix, &user_prefix, &user_suffix, &tool_prefix, &tool_suffix,
        &assistant_prefix, &end_of_turn, &after_end_of_turn}) {
    out += "|" + std::to_string(field->size()) + ":" + *field;
  }
  return out;
}

ChatTemplate chatml_template() {
  ChatTemplate t;
  t.name = "chatml";
  t.system_prefix = "<|im_start|>system\n";
  t.system_suffix = "<|im_end|>\n";
  t.user_prefix = "<|im_start|>user\n";
  t.user_suffix = "<|im_end|>\n";
  t.tool_prefix = "<|im_start|>user\n<tool_response>\n";
  t.tool_suffix = "\n</tool_response><|im_end|>\n";
  t.assistant_prefix = "<|im_start|>assistant\n";
  t.end_of_turn = "<|im_end|>";
  t.after_end_of_turn = "\n";
  return t;
}

ChatTemplate plain_template() {
  ChatTemplate t;
  t.name = "plain";
  t.system_suffix = "\n\n";
  t.user_prefix = "User: ";
  t.user_suffix = "\n\n";
  t.tool_prefix = "Tool: ";
  t.tool_suffix = "\n\n";
  t.assistant_prefix = "Assistant: ";
  t.end_of_turn = "<|endoftext|>";
  t.after_end_of_turn = "\n\n";
  return t;
}

ChatTemplate chat_template_by_name(std::string_view name) {
  if (name == "chatml") return chatml_template();
  if (name == "plain") return plain_template();
  throw Error("--chat-template", "name",
              "unknown chat template " + quote(name) + " (expected chatml or plain)");
}

std::string render_chat(const ChatTemplate& chat, std::span<const ChatMessage> messages,
                        bool add_generation_prompt) {
  std::string text;
  for (const ChatMessage& m : messages) text += chat.turn(m.role, m.content);
  if (add_generation_prompt) text += chat.assistant_prefix;
  return text;
}

}  // namespace crl
