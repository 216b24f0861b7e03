#include "server/gateway/openai_codec.h"

#include <optional>

#include "engine/json_reader.h"
#include "engine/json_text.h"
#include "server/gateway/template_kwargs.h"

namespace crl::server::gateway {

namespace {

// A message's path for an error ("messages[3].content[1]"), written only when there is an error (writing it
// for every message of every call cost more than reading the body).
struct MessagePath {
  size_t index;
  const char* base;
  std::string operator()(const std::string& suffix = "") const {
    return "messages[" + std::to_string(index) + "]" + base + suffix;
  }
};

std::string content_text(JsonView content, const MessagePath& where) {
  if (content.is_null()) return "";
  if (content.is_string()) return std::string(content.string());
  if (!content.is_array())
    throw bad_request("bad_content", where(" must be a string, null or a list of text parts"), where());
  std::string text;
  size_t i = 0;
  for (const JsonView part : content) {
    const JsonView type = part.find("type"), part_text = part.find("text");
    if (!part.is_object() || !type.is_string() || type.string() != "text" || !part_text.is_string()) {
      const std::string at = where("[") + std::to_string(i) + "]";
      throw bad_request("bad_content",
                        at + " must be {\"type\": \"text\", \"text\": STRING} (only text parts)", at);
    }
    if (i > 0) text += '\n';  // (parts joined as vLLM joins them for a template that takes text)
    text += part_text.string();
    ++i;
  }
  return text;
}

// OpenAI's response_format as the schema the upstream constrains the answer to: "text" none, "json_object"
// any JSON object, "json_schema" its json_schema.schema (an object; its text with the request's key order).
std::string read_response_format(JsonView format) {
  const auto refuse = [](const std::string& why, const char* field) -> std::string {
    throw bad_request("bad_field", why, field);
  };
  if (!format.is_object()) return refuse("response_format must be an object", "response_format");
  const JsonView type = format.find("type");
  if (!type.is_string())
    return refuse("response_format.type must be text, json_object or json_schema", "response_format.type");
  if (type.string() == "text") return "";
  if (type.string() == "json_object") return R"({"type":"object"})";
  if (type.string() != "json_schema")
    return refuse("response_format.type must be text, json_object or json_schema", "response_format.type");
  const JsonView schema = format.find("json_schema").find("schema");
  if (!schema.is_object()) {
    return refuse("response_format.json_schema.schema must be a JSON schema object",
                  "response_format.json_schema.schema");
  }
  return json_text(schema.to_ordered_json());
}

}  // namespace

std::optional<int> alternatives(JsonView body, const char* key) {
  const JsonView it = body.find(key);
  if (it.is_none()) return std::nullopt;
  if (!it.is_integer() || it.integer() < 0 || it.integer() > 20)
    throw bad_request("bad_field", std::string(key) + " must be an integer from 0 to 20", key);
  return static_cast<int>(it.integer());
}

std::string_view string_or_empty(JsonView object, std::string_view key) {
  const JsonView value = object.find(key);
  return value.is_string() ? value.string() : std::string_view();
}

std::optional<double> number(JsonView body, const char* key) {
  const JsonView it = body.find(key);
  if (it.is_none()) return std::nullopt;
  if (!it.is_number()) throw bad_request("bad_field", std::string(key) + " must be a number", key);
  return it.number();
}

std::optional<bool> flag(JsonView body, const char* key) {
  const JsonView it = body.find(key);
  if (it.is_none()) return std::nullopt;
  if (!it.is_bool()) throw bad_request("bad_field", std::string(key) + " must be true or false", key);
  return it.boolean();
}

Message parse_openai_message(JsonView message, size_t index) {
  const MessagePath where{index, ""};
  if (!message.is_object()) throw bad_request("bad_message", where(" must be an object"), where());
  const JsonView role = message.find("role");
  if (!role.is_string()) throw bad_request("bad_role", where(".role is missing"), where(".role"));
  const std::string_view name = role.string();
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
                      where(".role ") + quote(text_prefix(name)) +
                          " is not one of system, developer, user, assistant, tool",
                      where(".role"));
  }
  const JsonView content = message.find("content");
  if (!content.exists() && out.role != MessageRole::kAssistant)
    throw bad_request("bad_content", where(".content is missing"), where(".content"));
  if (content.exists()) out.content = content_text(content, MessagePath{index, ".content"});
  if (const JsonView calls = message.find("tool_calls"); !calls.is_none()) {
    if (out.role != MessageRole::kAssistant || !calls.is_array())
      throw bad_request("bad_tool_calls", where(".tool_calls must be a list on an assistant message"),
                        where(".tool_calls"));
    size_t i = 0;
    for (const JsonView call : calls) {
      const JsonView function = call.find("function");
      const JsonView function_name = function.find("name");
      if (!function.is_object() || !function_name.is_string()) {
        const std::string at = where(".tool_calls[") + std::to_string(i) + "]";
        throw bad_request("bad_tool_calls", at + " must be {\"function\": {\"name\", \"arguments\"}}", at);
      }
      ToolCall parsed;
      if (const JsonView id = call.find("id"); id.is_string()) parsed.id = id.string();
      parsed.name = function_name.string();
      const JsonView arguments = function.find("arguments");
      parsed.arguments = arguments.is_none()     ? "{}"
                         : arguments.is_string() ? std::string(arguments.string())
                                                 : arguments.to_json().dump();
      out.tool_calls.push_back(std::move(parsed));
      ++i;
    }
  }
  if (out.role == MessageRole::kTool) {
    if (const JsonView id = message.find("tool_call_id"); id.is_string()) out.tool_call_id = id.string();
  }
  return out;
}

std::vector<std::string> parse_stop(JsonView value, const std::string& field, bool allow_string) {
  std::vector<std::string> out;
  if (value.is_none()) return out;
  if (allow_string && value.is_string()) {
    out.emplace_back(value.string());
  } else if (value.is_array()) {
    for (const JsonView item : value) {
      if (!item.is_string()) throw bad_request("bad_stop", field + " must hold strings", field);
      out.emplace_back(item.string());
    }
  } else {
    throw bad_request(
        "bad_stop",
        field + (allow_string ? " must be a string or a list of strings" : " must be a list of strings"),
        field);
  }
  if (out.size() > 16) throw bad_request("bad_stop", field + " holds more than 16 strings", field);
  for (const std::string& s : out) {
    if (s.empty() || s.size() > 1024)
      throw bad_request("bad_stop", field + " must hold non-empty strings of at most 1024 bytes", field);
  }
  return out;
}

void read_tools(JsonView request, ToolsDecoder decode, KeptRequest* kept, ChatTurn& turn) {
  if (const JsonView tools = request.find("tools"); !tools.is_none()) {
    if (!tools.is_array()) throw bad_request("bad_tools", "tools must be a list", "tools");
    if (kept)
      kept->see_tools(tools, decode);
    else
      turn.tools = decode(tools);
  } else if (kept) {
    kept->see_no_tools();
  }
}

JsonDocument read_request_body(std::string_view body, const JsonKnownMember* known) {
  std::optional<JsonDocument> request;
  try {
    request = JsonDocument::parse(body, "the request body", kMaxJsonDepth, known);
  } catch (const JsonError& e) {
    throw bad_request(std::string(e.code()), e.what(), e.field());
  }
  if (!request->root().is_object()) throw bad_request("bad_json", "the request body must be a JSON object");
  return std::move(*request);
}

namespace {

// The fields chat and plain completions share.
void read_common(JsonView request, ChatRequest& out) {
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    const JsonView it = request.find(key);
    if (it.is_none()) continue;
    if (!it.is_integer() || it.integer() < 1)
      throw bad_request("bad_field", std::string(key) + " must be an integer >= 1", key);
    out.turn.max_tokens = it.integer();
    break;
  }
  out.turn.temperature = number(request, "temperature");
  out.turn.top_p = number(request, "top_p");
  if (const auto top_k = number(request, "top_k")) out.turn.top_k = static_cast<int>(*top_k);
  if (const auto n = number(request, "n"); n && *n != 1)
    throw bad_request("bad_field", "n must be 1 (a session samples one answer per call)", "n");
  if (const JsonView stream = request.find("stream"); !stream.is_none()) {
    if (!stream.is_bool()) throw bad_request("bad_field", "stream must be true or false", "stream");
    out.stream = stream.boolean();
  }
  if (const JsonView options = request.find("stream_options"); options.is_object()) {
    const JsonView usage = options.find("include_usage");
    if (!usage.is_none() && !usage.is_bool()) {
      throw bad_request("bad_field", "stream_options.include_usage must be true or false",
                        "stream_options.include_usage");
    }
    out.include_usage = usage.is_bool() && usage.boolean();
  }
  if (const JsonView model = request.find("model"); model.is_string()) out.model = model.string();
  if (const JsonView stop = request.find("stop"); stop.exists())
    out.turn.stop = parse_stop(stop, "stop", true);
  out.logprobs.token_ids = flag(request, "return_tokens_as_token_ids").value_or(false);
  out.return_token_ids = flag(request, "return_token_ids").value_or(false);
  if (const JsonView format = request.find("response_format"); !format.is_none())
    out.turn.json_schema = read_response_format(format);
  out.turn.prompt_ids = out.return_token_ids;
}

}  // namespace

ChatRequest parse_completion_request(std::string_view body) {
  const JsonDocument doc = read_request_body(body);
  const JsonView request = doc.root();
  ChatRequest out;
  const JsonView prompt = request.find("prompt");
  if (!prompt.is_string()) {
    throw bad_request(
        "bad_prompt",
        "prompt must be one string (the whole text so far; a list of prompts or token ids is not "
        "accepted: a session samples one answer per call)",
        "prompt");
  }
  out.turn.prompt = std::string(prompt.string());
  if (const JsonView echo = request.find("echo"); echo.is_bool() && echo.boolean())
    throw bad_request("unsupported_field", "echo is not supported", "echo");
  if (!request.find("suffix").is_none())
    throw bad_request("unsupported_field", "suffix (insertion) is not supported", "suffix");
  if (const auto best_of = number(request, "best_of"); best_of && *best_of != 1)
    throw bad_request("bad_field", "best_of must be 1", "best_of");
  read_common(request, out);
  const std::optional<int> logprobs = alternatives(request, "logprobs");
  out.logprobs.on = logprobs.has_value();
  out.turn.top_logprobs = logprobs.value_or(0);
  return out;
}

namespace {

// A chat request's tools as the chat template takes them: the OpenAI list as it is, keys in their order.
nlohmann::ordered_json openai_tools(JsonView tools) {
  return tools.to_ordered_json();
}

// What a chat request says besides its messages; with `kept`, the tools go there (KeptRequest::see_tools).
void read_chat_fields(JsonView request, ChatRequest& out, KeptRequest* kept) {
  read_tools(request, openai_tools, kept, out.turn);
  read_common(request, out);
  out.turn.tool_choice = read_openai_tool_choice(request);
  if (const JsonView kwargs = request.find("chat_template_kwargs"); !kwargs.is_none()) {
    if (!kwargs.is_object()) {
      throw bad_request("bad_field", "chat_template_kwargs must be an object of the template's variables",
                        "chat_template_kwargs");
    }
    if (kwargs.size() > 0) out.turn.template_kwargs = std::string(kwargs.raw());
  }
  add_reasoning_effort(out.turn.template_kwargs, request.find("reasoning_effort"), "reasoning_effort");
  out.logprobs.on = flag(request, "logprobs").value_or(false);
  out.turn.top_logprobs = alternatives(request, "top_logprobs").value_or(0);
  if (out.turn.top_logprobs > 0 && !out.logprobs.on)
    throw bad_request("bad_field", "top_logprobs needs logprobs: true", "top_logprobs");
}

JsonView messages_of(JsonView request) {
  const JsonView messages = request.find("messages");
  if (!messages.is_array())
    throw bad_request("bad_messages", "messages must be a list of messages", "messages");
  return messages;
}

uint32_t end_of(JsonView value, const char* text) {
  const std::string_view raw = value.raw();
  return static_cast<uint32_t>(raw.data() + raw.size() - text);
}

void openai_element(JsonView element, size_t index, const Message*, std::vector<Message>& out) {
  out.push_back(parse_openai_message(element, index));
}

// The body after the messages it repeats of the kept one (kept_request.h, step 2); nullopt when the reader
// refuses the rest (the whole body is decoded then, for the error's exact words).
std::optional<ChatRequest> parse_chat_rest(std::string_view body, const KeptRequest::Repeat& repeat,
                                           KeptRequest& kept) {
  const std::string document = kept.rest_document(body, repeat);
  std::optional<JsonDocument> doc;
  try {
    doc = JsonDocument::parse(document, "the request body");
  } catch (const JsonError&) {
    return std::nullopt;
  }
  const JsonView request = doc->root(), messages = request.find("messages");
  // The placeholder's array is the one the prefix opened (the same bytes); checked all the same.
  if (!request.is_object() || !messages.is_array() || messages.size() == 0 ||
      messages.raw().data() != document.data() + kept.messages_open())
    return std::nullopt;
  ChatRequest out;
  std::vector<Message> fresh;
  std::vector<uint32_t> ends;
  std::vector<uint64_t> keys;
  fresh.reserve(messages.size() - 1);
  size_t i = 0;
  for (const JsonView message : messages) {
    if (i++ == 0) continue;  // the placeholder
    fresh.push_back(parse_openai_message(message, repeat.elements + i - 2));
    keys.push_back(message_key(fresh.back()));
    ends.push_back(static_cast<uint32_t>(kept.body_offset(repeat, end_of(message, document.data()))));
  }
  read_chat_fields(request, out, &kept);
  kept.keep_rest(body, repeat, ends, std::move(fresh), keys, out);
  return out;
}

// The whole body; with `layout`, where its messages lie.
ChatRequest read_whole_chat(std::string_view body, MessagesLayout* layout, KeptRequest* kept) {
  const JsonDocument doc = read_request_body(body);
  const JsonView request = doc.root();
  ChatRequest out;
  const JsonView messages = messages_of(request);
  out.turn.messages.reserve(messages.size());
  size_t i = 0;
  for (const JsonView message : messages) {
    out.turn.messages.push_back(parse_openai_message(message, i++));
    if (layout) layout->add(message, body.data(), i);
  }
  read_chat_fields(request, out, kept);
  if (layout) layout->list_open = static_cast<size_t>(messages.raw().data() - body.data());
  return out;
}

}  // namespace

ChatRequest parse_chat_request(std::string_view body) {
  return read_whole_chat(body, nullptr, nullptr);
}

ChatRequest parse_chat_request(std::string_view body, KeptRequest& kept) {
  std::optional<ChatRequest> out;
  if (const KeptRequest::Repeat repeat = kept.repeated(body, BodyApi::kOpenAIChat); repeat.elements > 0) {
    out = kept.decode_middle(body, repeat, openai_element);
    if (!out) out = parse_chat_rest(body, repeat, kept);
  }
  if (!out) {
    MessagesLayout layout;
    out = read_whole_chat(body, &layout, &kept);
    kept.keep_whole(body, BodyApi::kOpenAIChat, std::move(layout), *out);
  }
  kept.lend(out->turn);
  return std::move(*out);
}

}  // namespace crl::server::gateway
