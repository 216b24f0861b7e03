#include "server/gateway/anthropic_codec.h"

#include "engine/json_reader.h"
#include "server/gateway/sse.h"

namespace crl::server::gateway {

using json = nlohmann::json;

namespace {

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A string, or a list of text blocks, as text.
std::string block_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw bad_request("bad_content", where + " must be a string or a list of blocks", where);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& block = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!block.is_object() || block.value("type", "") != "text" || !block.contains("text") ||
        !block["text"].is_string())
      throw bad_request("bad_content", at + " must be a text block {\"type\": \"text\", \"text\"}", at);
    text += block["text"].get<std::string>();
  }
  return text;
}

void add_turn(const json& message, const std::string& where, std::vector<Message>& out) {
  if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
    throw bad_request("bad_role", where + ".role is missing", where + ".role");
  const std::string role = message["role"].get<std::string>();
  if (role != "user" && role != "assistant") {
    throw bad_request("bad_role",
                      where + ".role " + quote(text_prefix(role)) + " is not one of user, assistant",
                      where + ".role");
  }
  const auto content = message.find("content");
  if (content == message.end())
    throw bad_request("bad_content", where + ".content is missing", where + ".content");
  const std::string at = where + ".content";
  if (content->is_string()) {
    out.push_back(Message{
        role == "user" ? MessageRole::kUser : MessageRole::kAssistant, content->get<std::string>(), {}, {}});
    return;
  }
  if (!content->is_array())
    throw bad_request("bad_content", at + " must be a string or a list of blocks", at);
  if (role == "assistant") {
    Message assistant{MessageRole::kAssistant, "", {}, {}};
    for (size_t i = 0; i < content->size(); ++i) {
      const json& block = (*content)[i];
      const std::string b = at + "[" + std::to_string(i) + "]";
      const std::string type = block.is_object() ? block.value("type", "") : "";
      if (type == "text" && block.contains("text") && block["text"].is_string()) {
        assistant.content += block["text"].get<std::string>();
      } else if (type == "tool_use" && block.contains("name") && block["name"].is_string()) {
        assistant.tool_calls.push_back(ToolCall{block.value("id", ""), block["name"].get<std::string>(),
                                                block.contains("input") ? block["input"].dump() : "{}"});
      } else if (type != "thinking" && type != "redacted_thinking") {
        throw bad_request("bad_content", b + " must be a text or tool_use block", b);
      }
    }
    out.push_back(std::move(assistant));
    return;
  }
  std::string text;
  const auto flush = [&] {
    if (!text.empty()) out.push_back(Message{MessageRole::kUser, std::move(text), {}, {}});
    text.clear();
  };
  for (size_t i = 0; i < content->size(); ++i) {
    const json& block = (*content)[i];
    const std::string b = at + "[" + std::to_string(i) + "]";
    const std::string type = block.is_object() ? block.value("type", "") : "";
    if (type == "text" && block.contains("text") && block["text"].is_string()) {
      text += block["text"].get<std::string>();
    } else if (type == "tool_result") {
      flush();
      Message result{MessageRole::kTool, "", {}, block.value("tool_use_id", "")};
      if (block.contains("content")) result.content = block_text(block["content"], b + ".content");
      if (block.value("is_error", false)) result.content = "Error: " + result.content;
      out.push_back(std::move(result));
    } else {
      throw bad_request("bad_content",
                        b + " must be a text or tool_result block (" + quote(text_prefix(type)) + ")", b);
    }
  }
  flush();
}

const char* stop_reason(const Completion& c) {
  if (c.finish_reason == "length") return "max_tokens";
  if (c.finish_reason == "tool_calls") return "tool_use";
  return "end_turn";
}

json content_blocks(const Completion& c) {
  json blocks = json::array();
  if (!c.reply.content.empty() || c.reply.tool_calls.empty())
    blocks.push_back({{"type", "text"}, {"text", c.reply.content}});
  for (const ToolCall& call : c.reply.tool_calls) {
    json input = json::parse(call.arguments, nullptr, false);
    if (input.is_discarded()) input = json::object();
    blocks.push_back({{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", input}});
  }
  return blocks;
}

std::string message_id(const Completion& c) {
  return "msg_" + c.id.substr(c.id.find('-') + 1);
}

}  // namespace

MessagesRequest parse_messages_request(std::string_view body, bool count_only) {
  json request;
  try {
    request = read_json(body, "the request body");
  } catch (const JsonError& e) {
    throw bad_request(std::string(e.code()), e.what(), e.field());
  }
  if (!request.is_object()) throw bad_request("bad_json", "the request body must be a JSON object");
  MessagesRequest out;
  if (const auto system = request.find("system"); system != request.end() && !system->is_null())
    out.turn.messages.push_back(Message{MessageRole::kSystem, block_text(*system, "system"), {}, {}});
  const auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array())
    throw bad_request("bad_messages", "messages must be a list of messages", "messages");
  for (size_t i = 0; i < messages->size(); ++i)
    add_turn((*messages)[i], "messages[" + std::to_string(i) + "]", out.turn.messages);
  if (const auto tools = request.find("tools"); tools != request.end() && !tools->is_null()) {
    if (!tools->is_array()) throw bad_request("bad_tools", "tools must be a list", "tools");
    out.turn.tools = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string())
        throw bad_request("bad_tools", "tools[" + std::to_string(i) + "] needs a name", "tools");
      json function = {{"name", tool["name"]}};
      if (tool.contains("description")) function["description"] = tool["description"];
      function["parameters"] = tool.value("input_schema", json::object());
      out.turn.tools.push_back({{"type", "function"}, {"function", function}});
    }
  }
  const auto max_tokens = request.find("max_tokens");
  if (!count_only) {
    if (max_tokens == request.end() || !max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1)
      throw bad_request("bad_field", "max_tokens is required: an integer >= 1", "max_tokens");
    out.turn.max_tokens = max_tokens->get<int64_t>();
  }
  if (const auto stop = request.find("stop_sequences");
      stop != request.end() && stop->is_array() && !stop->empty()) {
    throw bad_request(
        "unsupported_field",
        "stop_sequences are not supported yet: the gateway forwards token ids and stops at the end "
        "of turn",
        "stop_sequences");
  }
  for (const char* key : {"temperature", "top_p"}) {
    const auto it = request.find(key);
    if (it == request.end() || it->is_null()) continue;
    if (!it->is_number()) throw bad_request("bad_field", std::string(key) + " must be a number", key);
    (std::string(key) == "temperature" ? out.turn.temperature : out.turn.top_p) = it->get<double>();
  }
  if (const auto top_k = request.find("top_k"); top_k != request.end() && top_k->is_number_integer())
    out.turn.top_k = top_k->get<int>();
  if (const auto stream = request.find("stream"); stream != request.end() && stream->is_boolean())
    out.stream = stream->get<bool>();
  if (const auto model = request.find("model"); model != request.end() && model->is_string())
    out.model = model->get<std::string>();
  return out;
}

std::string anthropic_message_json(const Completion& c, const std::string& model) {
  return dump({{"id", message_id(c)},
               {"type", "message"},
               {"role", "assistant"},
               {"model", model},
               {"content", content_blocks(c)},
               {"stop_reason", stop_reason(c)},
               {"stop_sequence", nullptr},
               {"usage",
                {{"input_tokens", c.prompt_tokens},
                 {"output_tokens", c.completion_tokens},
                 {"cache_read_input_tokens", c.cached_tokens}}}});
}

std::string anthropic_message_sse(const Completion& c, const std::string& model) {
  std::string out;
  append_sse_event(out, "message_start",
                   dump({{"type", "message_start"},
                         {"message",
                          {{"id", message_id(c)},
                           {"type", "message"},
                           {"role", "assistant"},
                           {"model", model},
                           {"content", json::array()},
                           {"stop_reason", nullptr},
                           {"stop_sequence", nullptr},
                           {"usage",
                            {{"input_tokens", c.prompt_tokens},
                             {"output_tokens", 0},
                             {"cache_read_input_tokens", c.cached_tokens}}}}}}));
  const json blocks = content_blocks(c);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const json& block = blocks[i];
    json start = block, delta;
    if (block["type"] == "text") {
      start["text"] = "";
      delta = {{"type", "text_delta"}, {"text", block["text"]}};
    } else {
      start["input"] = json::object();
      delta = {{"type", "input_json_delta"}, {"partial_json", block["input"].dump()}};
    }
    append_sse_event(out, "content_block_start",
                     dump({{"type", "content_block_start"}, {"index", i}, {"content_block", start}}));
    append_sse_event(out, "content_block_delta",
                     dump({{"type", "content_block_delta"}, {"index", i}, {"delta", delta}}));
    append_sse_event(out, "content_block_stop", dump({{"type", "content_block_stop"}, {"index", i}}));
  }
  append_sse_event(out, "message_delta",
                   dump({{"type", "message_delta"},
                         {"delta", {{"stop_reason", stop_reason(c)}, {"stop_sequence", nullptr}}},
                         {"usage", {{"output_tokens", c.completion_tokens}}}}));
  append_sse_event(out, "message_stop", dump({{"type", "message_stop"}}));
  return out;
}

std::string anthropic_error_json(const GatewayError& e) {
  const char* type = "api_error";
  switch (e.status()) {
    case 400:
    case 405:
    case 409:
    case 413:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
    case 529:
      type = "overloaded_error";
      break;
    default:
      break;
  }
  return dump({{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}, {"code", e.code()}}}});
}

}  // namespace crl::server::gateway
