#pragma once
// The messages of a harness's conversation, independent of the API that carried them (OpenAI chat
// completions or Anthropic messages), and what the gateway needs of them: a key per message (to recognise
// the history a session already holds), the tool-call text convention of Qwen-style templates, and the
// tool definitions block of the system turn.
//
// Tool calls are written into the assistant's text the way Qwen2.5/Qwen3 templates write them, one block per
// call: "<tool_call>\n{\"name\": NAME, \"arguments\": ARGS}\n</tool_call>", and read back from sampled text
// the same way (a block that is not valid JSON with a string name stays text).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace crl::server::gateway {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON text (the OpenAI API's convention)
  bool operator==(const ToolCall&) const = default;
};

enum class MessageRole { kSystem, kUser, kAssistant, kTool };

struct Message {
  MessageRole role = MessageRole::kUser;
  std::string content;               // text parts joined by "\n" (vLLM's way; Anthropic system blocks by "")
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only
  bool operator==(const Message&) const = default;
};

// What an assistant turn says: its text and the tool calls parsed out of it, and the reasoning read out of
// the sampled text (reasoning_format.h; not part of reply_key: harnesses copy it back or not).
struct AssistantReply {
  std::string content;
  std::vector<ToolCall> tool_calls;
  std::string reasoning;
};

// A 64-bit key of everything about a message that the rendered prompt depends on (role, text, tool calls
// with their arguments normalised as JSON, tool_call_id). Tool call ids are left out: they are ours to
// invent and harnesses copy them back inconsistently.
uint64_t message_key(const Message& message);
// The key of the harness's copy of an answer we gave.
uint64_t reply_key(const AssistantReply& reply);
// A tool call as a tool_use block's `input` in the Anthropic Messages API: its arguments when they are a JSON
// object, else {} (that API allows nothing else; the OpenAI API carries such arguments as they were written).
nlohmann::json tool_input(const ToolCall& call);
// The key of an Anthropic harness's copy of an answer we gave: each call's arguments as tool_input() answered
// them. Equal to reply_key() when every call's arguments are an object.
uint64_t anthropic_reply_key(const AssistantReply& reply);
// The key of the tool definitions (0 when there are none).
uint64_t tools_key(const nlohmann::ordered_json& tools);

// The text of an assistant turn as the template writes it: content, then one <tool_call> block per call.
std::string assistant_text(std::string_view content, const std::vector<ToolCall>& calls);
// The text without the spaces and line breaks around it (how answers' tool-call blocks are read).
std::string_view trim_blanks(std::string_view text);
// Splits sampled text into content and tool calls; ids are "call_<id_prefix>_<i>".
AssistantReply parse_reply(std::string_view text, const std::string& id_prefix);
// The tools section the Qwen-style template appends to the system turn (empty for no tools).
std::string tools_system_block(const nlohmann::ordered_json& tools);

}  // namespace crl::server::gateway
