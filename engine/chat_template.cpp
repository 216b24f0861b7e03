#include "engine/chat_template.h"

#include "engine/error.h"

namespace crl {

// chat_template_file.cpp: the Jinja side.
std::string jinja_chat_definition(const JinjaChatSource& source);
std::string render_with_jinja(const JinjaChatSource& source, const ChatRenderRequest& request);

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
  if (system_opens_user_turn) out += "|system-opens-user-turn";  // (others keep their definitions)
  if (jinja)
    out += jinja_chat_definition(*jinja);  // the built-ins have none: their definitions are unchanged
  return out;
}

void ChatTemplate::require_turns(const std::string& option) const {
  if (!turns_error.empty())
    throw Error(option + " " + quote(name), "chat template",
                "cannot be cut into turns for episodes: " + turns_error);
}

std::string ChatTemplate::render(const ChatRenderRequest& request) const {
  if (jinja) return render_with_jinja(*jinja, request);
  if (!request.message_values.is_undefined())
    throw Error("chat request", "message_values", "only a Jinja template renders converted messages");
  if (!request.tools.is_null())
    throw Error("chat request", "tools", "the " + name + " template renders no tools");
  if (!request.messages.is_array())
    throw Error("chat request", "messages", "must be an array of message objects");
  std::string text;
  for (size_t k = 0; k < request.messages.size(); ++k) {
    const auto& m = request.messages[k];
    const std::string field = "messages[" + std::to_string(k) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw Error("chat request", field + ".role", "must be a string");
    if (m.contains("tool_calls"))
      throw Error("chat request", field + ".tool_calls", "the " + name + " template renders no tool calls");
    const std::string role = m["role"].get<std::string>();
    ChatRole r;
    if (role == "system")
      r = ChatRole::kSystem;
    else if (role == "user")
      r = ChatRole::kUser;
    else if (role == "assistant")
      r = ChatRole::kAssistant;
    else if (role == "tool")
      r = ChatRole::kTool;
    else
      throw Error("chat request", field + ".role",
                  "unknown role " + quote(role) + " (system, user, assistant, tool)");
    const auto content = m.find("content");
    if (content != m.end() && !content->is_string() && !content->is_null())
      throw Error("chat request", field + ".content", "must be a string for the " + name + " template");
    text += turn(r, content != m.end() && content->is_string() ? content->get<std::string>() : "");
  }
  if (request.add_generation_prompt) text += assistant_prefix;
  return text;
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
  for (size_t k = 0; k < messages.size(); ++k) {
    const ChatMessage& m = messages[k];
    if (k > 0 && m.role == ChatRole::kUser && messages[k - 1].role == ChatRole::kSystem) {
      text += std::string(chat.user_prefix_after_system()) + m.content + chat.user_suffix;
    } else {
      text += chat.turn(m.role, m.content);
    }
  }
  if (add_generation_prompt) text += chat.assistant_prefix;
  return text;
}

}  // namespace crl
