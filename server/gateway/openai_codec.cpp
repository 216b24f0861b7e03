#include "server/gateway/openai_codec.h"

#include "engine/json_reader.h"
#include "server/gateway/sse.h"

namespace crl::server::gateway {

using json = nlohmann::json;

namespace {

std::string content_text(const json& content, const std::string& where) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw bad_request("bad_content", where + " must be a string, null or a list of text parts", where);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      throw bad_request("bad_content",
                        at + " must be {\"type\": \"text\", \"text\": STRING} (only text parts)", at);
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

std::optional<double> number(const json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) throw bad_request("bad_field", std::string(key) + " must be a number", key);
  return it->get<double>();
}

}  // namespace

Message parse_openai_message(const json& message, const std::string& where) {
  if (!message.is_object()) throw bad_request("bad_message", where + " must be an object", where);
  const auto role = message.find("role");
  if (role == message.end() || !role->is_string())
    throw bad_request("bad_role", where + ".role is missing", where + ".role");
  const std::string name = role->get<std::string>();
  Message out;
  if (name == "system" || name == "developer") {
    out.role = MessageRole::kSystem;
  } else if (name == "user") {
    out.role = MessageRole::kUser;
  } else if (name == "assistant") {
    out.role = MessageRole::kAssistant;
  } else if (name == "tool") {
    out.role = MessageRole::kTool;
  } else {
    throw bad_request("bad_role",
                      where + ".role " + quote(text_prefix(name)) +
                          " is not one of system, developer, user, assistant, tool",
                      where + ".role");
  }
  const auto content = message.find("content");
  if (content == message.end() && out.role != MessageRole::kAssistant)
    throw bad_request("bad_content", where + ".content is missing", where + ".content");
  if (content != message.end()) out.content = content_text(*content, where + ".content");
  if (const auto calls = message.find("tool_calls"); calls != message.end() && !calls->is_null()) {
    if (out.role != MessageRole::kAssistant || !calls->is_array())
      throw bad_request("bad_tool_calls", where + ".tool_calls must be a list on an assistant message",
                        where + ".tool_calls");
    for (size_t i = 0; i < calls->size(); ++i) {
      const json& call = (*calls)[i];
      const std::string at = where + ".tool_calls[" + std::to_string(i) + "]";
      const json* function = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
      if (function == nullptr || !function->is_object() || !function->contains("name") ||
          !(*function)["name"].is_string()) {
        throw bad_request("bad_tool_calls", at + " must be {\"function\": {\"name\", \"arguments\"}}", at);
      }
      ToolCall parsed;
      parsed.id = call.value("id", "");
      parsed.name = (*function)["name"].get<std::string>();
      const auto arguments = function->find("arguments");
      parsed.arguments = arguments == function->end() || arguments->is_null() ? "{}"
                         : arguments->is_string()                             ? arguments->get<std::string>()
                                                                              : arguments->dump();
      out.tool_calls.push_back(std::move(parsed));
    }
  }
  if (out.role == MessageRole::kTool) {
    const auto id = message.find("tool_call_id");
    if (id != message.end() && id->is_string()) out.tool_call_id = id->get<std::string>();
  }
  return out;
}

ChatRequest parse_chat_request(std::string_view body) {
  json request;
  try {
    request = read_json(body, "the request body");
  } catch (const JsonError& e) {
    throw bad_request(std::string(e.code()), e.what(), e.field());
  }
  if (!request.is_object()) throw bad_request("bad_json", "the request body must be a JSON object");
  ChatRequest out;
  const auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array())
    throw bad_request("bad_messages", "messages must be a list of messages", "messages");
  out.turn.messages.reserve(messages->size());
  for (size_t i = 0; i < messages->size(); ++i)
    out.turn.messages.push_back(parse_openai_message((*messages)[i], "messages[" + std::to_string(i) + "]"));
  if (const auto tools = request.find("tools"); tools != request.end() && !tools->is_null()) {
    if (!tools->is_array()) throw bad_request("bad_tools", "tools must be a list", "tools");
    out.turn.tools = *tools;
  }
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    const auto it = request.find(key);
    if (it == request.end() || it->is_null()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 1)
      throw bad_request("bad_field", std::string(key) + " must be an integer >= 1", key);
    out.turn.max_tokens = it->get<int64_t>();
    break;
  }
  out.turn.temperature = number(request, "temperature");
  out.turn.top_p = number(request, "top_p");
  if (const auto top_k = number(request, "top_k")) out.turn.top_k = static_cast<int>(*top_k);
  if (const auto n = number(request, "n"); n && *n != 1)
    throw bad_request("bad_field", "n must be 1 (a session samples one answer per call)", "n");
  if (const auto stream = request.find("stream"); stream != request.end() && !stream->is_null()) {
    if (!stream->is_boolean()) throw bad_request("bad_field", "stream must be true or false", "stream");
    out.stream = stream->get<bool>();
  }
  if (const auto options = request.find("stream_options"); options != request.end() && options->is_object())
    out.include_usage = options->value("include_usage", false);
  if (const auto model = request.find("model"); model != request.end() && model->is_string())
    out.model = model->get<std::string>();
  return out;
}

namespace {

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& call : calls) {
    out.push_back({{"id", call.id},
                   {"type", "function"},
                   {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  return out;
}

json usage_json(const Completion& c) {
  return {{"prompt_tokens", c.prompt_tokens},
          {"completion_tokens", c.completion_tokens},
          {"total_tokens", c.prompt_tokens + c.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", c.cached_tokens}}}};
}

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string chat_completion_json(const Completion& c, const std::string& model) {
  json message = {{"role", "assistant"}, {"content", c.reply.content}};
  if (!c.reply.tool_calls.empty()) {
    message["tool_calls"] = tool_calls_json(c.reply.tool_calls);
    if (c.reply.content.empty()) message["content"] = nullptr;
  }
  const json out = {{"id", c.id},
                    {"object", "chat.completion"},
                    {"created", c.created},
                    {"model", model},
                    {"choices", json::array({{{"index", 0},
                                              {"message", message},
                                              {"logprobs", nullptr},
                                              {"finish_reason", c.finish_reason}}})},
                    {"usage", usage_json(c)}};
  return dump(out);
}

std::string chat_completion_sse(const Completion& c, const std::string& model, bool include_usage) {
  std::string out;
  const auto chunk = [&](const json& delta, const json& finish) {
    json item = {
        {"id", c.id},
        {"object", "chat.completion.chunk"},
        {"created", c.created},
        {"model", model},
        {"choices",
         json::array({{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}}})}};
    if (include_usage) item["usage"] = nullptr;
    append_sse_data(out, dump(item));
  };
  chunk({{"role", "assistant"}, {"content", ""}}, nullptr);
  if (!c.reply.content.empty()) chunk({{"content", c.reply.content}}, nullptr);
  for (size_t i = 0; i < c.reply.tool_calls.size(); ++i) {
    const ToolCall& call = c.reply.tool_calls[i];
    chunk(
        {{"tool_calls", json::array({{{"index", i},
                                      {"id", call.id},
                                      {"type", "function"},
                                      {"function", {{"name", call.name}, {"arguments", call.arguments}}}}})}},
        nullptr);
  }
  chunk(json::object(), c.finish_reason);
  if (include_usage) {
    const json usage = {{"id", c.id},     {"object", "chat.completion.chunk"}, {"created", c.created},
                        {"model", model}, {"choices", json::array()},          {"usage", usage_json(c)}};
    append_sse_data(out, dump(usage));
  }
  append_sse_data(out, "[DONE]");
  return out;
}

std::string openai_error_json(const GatewayError& e) {
  const json out = {{"error",
                     {{"message", e.what()},
                      {"type", e.type()},
                      {"param", e.param().empty() ? json(nullptr) : json(e.param())},
                      {"code", e.code()}}}};
  return dump(out);
}

}  // namespace crl::server::gateway
