#pragma once
// Chat templates: how system / user / assistant / tool turns are written as text for a tokenizer.
//  * "chatml" (as Qwen2/Qwen2.5 use it): "<|im_start|>ROLE\nTEXT<|im_end|>\n"; a tool result is a user turn
//    "<|im_start|>user\n<tool_response>\nTEXT\n</tool_response><|im_end|>\n"; an assistant turn ends with
//    the special token <|im_end|>.
//  * "plain": "TEXT\n\n" for the system, "User: TEXT\n\n", "Tool: TEXT\n\n", and "Assistant: TEXT" ended by
//    the special token <|endoftext|> and "\n\n", for tokenizers without ChatML tokens (o200k_base, GPT-2).
// The end-of-turn string must be a special token of the tokenizer: policies end a turn by sampling it.
// Only the template's own strings produce special-token ids: a turn is encoded as pieces (turn_pieces,
// Tokenizer::encode_pieces) in which the content is ordinary text, whatever special-token strings it holds.
#include <array>
#include <span>
#include <string>
#include <string_view>

#include "engine/tokenizer.h"

namespace crl {

enum class ChatRole { kSystem, kUser, kAssistant, kTool };
std::string_view chat_role_name(ChatRole role);

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
};

struct ChatTemplate {
  std::string name;
  std::string system_prefix, system_suffix;
  std::string user_prefix, user_suffix;
  std::string tool_prefix, tool_suffix;
  std::string assistant_prefix;   // the header that opens an assistant turn (the generation prompt)
  std::string end_of_turn;        // closes an assistant turn; a special token
  std::string after_end_of_turn;  // written after end_of_turn

  // A complete turn. An assistant turn includes end_of_turn and after_end_of_turn.
  std::string turn(ChatRole role, std::string_view content) const;
  // The same turn as template text, content, template text (views into this template and `content`).
  std::array<TextPiece, 4> turn_pieces(ChatRole role, std::string_view content) const;
  // Everything that defines the template, for fingerprints.
  std::string definition() const;
  bool operator==(const ChatTemplate&) const = default;
};

ChatTemplate chatml_template();
ChatTemplate plain_template();
// "chatml" | "plain"; throws crl::Error for another name.
ChatTemplate chat_template_by_name(std::string_view name);

// The turns in order; with add_generation_prompt, the assistant header follows (the model writes next).
std::string render_chat(const ChatTemplate& chat, std::span<const ChatMessage> messages,
                        bool add_generation_prompt);

}  // namespace crl
