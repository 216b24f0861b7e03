#include "server/gateway/chat_messages.h"

#include "engine/sha256.h"

namespace crl::server::gateway {

using json = nlohmann::json;

namespace {

// Arguments as canonical JSON when they parse (so that {"a":1} and {"a": 1} are the same call).
std::string normalized_arguments(const std::string& arguments) {
  const json parsed = json::parse(arguments, nullptr, false);
  return parsed.is_discarded() ? arguments : parsed.dump();
}

void add_field(std::string& out, std::string_view field) {
  out += std::to_string(field.size());
  out += ':';
  out += field;
}

uint64_t key_of(MessageRole role, std::string_view content, const std::vector<ToolCall>& calls,
                std::string_view tool_call_id) {
  std::string canonical;
  canonical.reserve(content.size() + 64);
  canonical += static_cast<char>('0' + static_cast<int>(role));
  add_field(canonical, content);
  for (const ToolCall& call : calls) {
    add_field(canonical, call.name);
    add_field(canonical, normalized_arguments(call.arguments));
  }
  add_field(canonical, tool_call_id);
  return sha256_u64(canonical);
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == '\n' || text.front() == ' ')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  return text;
}

}  // namespace

uint64_t message_key(const Message& message) {
  return key_of(message.role, message.content, message.tool_calls, message.tool_call_id);
}

uint64_t reply_key(const AssistantReply& reply) {
  return key_of(MessageRole::kAssistant, reply.content, reply.tool_calls, "");
}

uint64_t tools_key(const json& tools) {
  if (tools.is_null() || (tools.is_array() && tools.empty())) return 0;
  return sha256_u64(tools.dump());
}

std::string assistant_text(std::string_view content, const std::vector<ToolCall>& calls) {
  std::string out(content);
  for (const ToolCall& call : calls) {
    if (!out.empty()) out += '\n';
    json arguments = json::parse(call.arguments, nullptr, false);
    if (arguments.is_discarded()) arguments = call.arguments;
    out += "<tool_call>\n{\"name\": " + json(call.name).dump() + ", \"arguments\": " + arguments.dump() +
           "}\n</tool_call>";
  }
  return out;
}

AssistantReply parse_reply(std::string_view text, const std::string& id_prefix) {
  static constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  AssistantReply reply;
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kOpen, at);
    if (open == std::string_view::npos) break;
    const size_t close = text.find(kClose, open + kOpen.size());
    if (close == std::string_view::npos) break;
    const std::string_view inside = trim(text.substr(open + kOpen.size(), close - open - kOpen.size()));
    const json call = json::parse(inside, nullptr, false);
    if (call.is_object() && call.contains("name") && call["name"].is_string()) {
      content += text.substr(at, open - at);
      ToolCall parsed;
      parsed.id = "call_" + id_prefix + "_" + std::to_string(reply.tool_calls.size());
      parsed.name = call["name"].get<std::string>();
      const auto arguments = call.find("arguments");
      parsed.arguments = arguments == call.end()  ? "{}"
                         : arguments->is_string() ? arguments->get<std::string>()
                                                  : arguments->dump();
      reply.tool_calls.push_back(std::move(parsed));
    } else {
      content += text.substr(at, close + kClose.size() - at);  // not a call: it stays text
    }
    at = close + kClose.size();
  }
  content += text.substr(std::min(at, text.size()));
  reply.content = reply.tool_calls.empty() ? std::string(text) : std::string(trim(content));
  return reply;
}

std::string tools_system_block(const json& tools) {
  if (!tools.is_array() || tools.empty()) return "";
  std::string out =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
      "function signatures within <tools></tools> XML tags:\n<tools>";
  for (const json& tool : tools) out += "\n" + tool.dump();
  out +=
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call>";
  return out;
}

}  // namespace crl::server::gateway
