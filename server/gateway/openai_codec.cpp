#include "server/gateway/openai_codec.h"

#include <map>
#include <optional>

#include "engine/json_escape.h"
#include "engine/json_reader.h"
#include "engine/json_text.h"
#include "engine/sse.h"
#include "server/gateway/answer_writer.h"
#include "wire/utf8.h"

namespace crl::server::gateway {

using json = nlohmann::json;

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
    text += part_text.string();
    ++i;
  }
  return text;
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

// A count of alternatives per token (chat `top_logprobs`, the completions' `logprobs`): an integer in
// 0..20, as vLLM takes it (OpenAI's own API stops at 20 for chat, 5 for completions).
std::optional<int> alternatives(JsonView body, const char* key) {
  const JsonView it = body.find(key);
  if (it.is_none()) return std::nullopt;
  if (!it.is_integer() || it.integer() < 0 || it.integer() > 20)
    throw bad_request("bad_field", std::string(key) + " must be an integer from 0 to 20", key);
  return static_cast<int>(it.integer());
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

JsonDocument read_request_body(std::string_view body) {
  std::optional<JsonDocument> request;
  try {
    request = JsonDocument::parse(body, "the request body");
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
  // tool_choice "none": the answer's text is not read for tool calls. "auto", "required" and a named
  // function are not enforced (the template's tools and the model decide; vLLM would constrain "required").
  if (const JsonView choice = request.find("tool_choice"); choice.is_string() && choice.string() == "none")
    out.turn.tool_calls = false;
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

void openai_element(JsonView element, size_t index, std::vector<Message>& out) {
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

namespace {

// The answers are written by hand (answer_writer.h): these are their pieces.

// `key` then the ids as a JSON list.
void put_ids(std::string& out, std::string_view key, std::span<const TokenId> ids) {
  out += key;
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    append_json_int(out, ids[i]);
  }
  out += ']';
}

// "prompt_token_ids":[..] from the text the session kept (Completion::prompt_ids), then a ',' (a chat
// answer's top level, before "usage") or after one (a completions choice, after "logprobs").
void put_prompt_ids(std::string& out, const Completion& c, bool top_level = true) {
  if (!top_level) out += ',';
  out += "\"prompt_token_ids\":";
  out += c.prompt_ids.empty() ? std::string_view("[]") : std::string_view(c.prompt_ids);
  if (top_level) out += ',';
}

void put_usage(std::string& out, const Completion& c) {
  out += "\"usage\":{\"completion_tokens\":";
  append_json_int(out, c.completion_tokens);
  out += ",\"prompt_tokens\":";
  append_json_int(out, c.prompt_tokens);
  out += ",\"prompt_tokens_details\":{\"cached_tokens\":";
  append_json_int(out, c.cached_tokens);
  out += "},\"total_tokens\":";
  append_json_int(out, c.prompt_tokens + c.completion_tokens);
  out += '}';
}

// "created":N,"id":ID,"model":MODEL,"object":OBJECT,
void put_header(std::string& out, const Completion& c, const std::string& model, std::string_view object) {
  out += "\"created\":";
  append_json_int(out, c.created);
  out += ",\"id\":";
  put_string(out, c.id);
  out += ",\"model\":";
  put_string(out, model);
  out += ",\"object\":";
  put_string(out, object);
  out += ',';
}

}  // namespace

std::optional<TokenLogprobs> token_logprobs(const Completion& c, LogprobsAsk ask,
                                            const Tokenizer& tokenizer) {
  if (!ask.on) return std::nullopt;
  TokenLogprobs out;
  out.tokens.reserve(c.ids.size());
  for (const TokenId id : c.ids) {
    out.tokens.push_back(ask.token_ids ? "token_id:" + std::to_string(id)
                                       : tokenizer.decode(std::span<const TokenId>(&id, 1)));
  }
  out.logprobs = c.logprobs;
  out.top.resize(c.top.size());
  for (size_t i = 0; i < c.top.size(); ++i) {
    for (const llm::TopLogprob& top : c.top[i]) {
      std::string token;
      if (top.id >= 0 && ask.token_ids)
        token = "token_id:" + std::to_string(top.id);
      else if (top.id >= 0)
        token = tokenizer.decode(std::span<const TokenId>(&top.id, 1));
      else
        token = top.text;  // the OpenAI API's text: its id is unknown
      out.top[i].push_back(Alternative{std::move(token), top.logprob});
    }
  }
  return out;
}

namespace {

// {"bytes":[..],"logprob":X,"token":T (without the closing brace): one token of chat's logprobs.
void put_chat_token(std::string& out, const std::string& token, float logprob) {
  out += "{\"bytes\":[";
  for (size_t b = 0; b < token.size(); ++b) {
    if (b) out += ',';
    append_json_int(out, static_cast<unsigned char>(token[b]));
  }
  out += "],\"logprob\":";
  put_logprob(out, logprob);
  out += ",\"token\":";
  put_string(out, token);
}

// Chat's logprobs: null, or {"content":[{"bytes":[..],"logprob":X,"token":T,"top_logprobs":[{"bytes":..,
// "logprob":..,"token":..},..]},...]}.
void put_chat_logprobs(std::string& out, const TokenLogprobs* logprobs) {
  if (!logprobs) {
    out += "null";
    return;
  }
  out += "{\"content\":[";
  for (size_t i = 0; i < logprobs->tokens.size(); ++i) {
    if (i) out += ',';
    put_chat_token(out, logprobs->tokens[i], logprobs->logprobs[i]);
    out += ",\"top_logprobs\":[";
    if (i < logprobs->top.size()) {
      for (size_t k = 0; k < logprobs->top[i].size(); ++k) {
        if (k) out += ',';
        put_chat_token(out, logprobs->top[i][k].token, logprobs->top[i][k].logprob);
        out += '}';
      }
    }
    out += "]}";
  }
  out += "]}";
}

// Characters of a token as written (an ill-formed sequence is one U+FFFD): Python's len() of the string.
int64_t written_characters(const std::string& token) {
  const auto count = [](std::string_view text) {
    int64_t n = 0;
    for (const char ch : text) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
    return n;
  };
  return wire::is_valid_utf8(token) ? count(token) : count(wire::valid_utf8(token));
}

// The completions' logprobs: null, or {"text_offset":[..],"token_logprobs":[..],"tokens":[..],
// "top_logprobs":[{T:X},..]} (the sampled token alone in each top_logprobs entry, as for `logprobs: 0`).
void put_text_logprobs(std::string& out, const TokenLogprobs* logprobs) {
  if (!logprobs) {
    out += "null";
    return;
  }
  const size_t n = logprobs->tokens.size();
  out += "{\"text_offset\":[";
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    append_json_int(out, offset);
    offset += written_characters(logprobs->tokens[i]);
  }
  out += "],\"token_logprobs\":[";
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    put_logprob(out, logprobs->logprobs[i]);
  }
  out += "],\"tokens\":[";
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    put_string(out, logprobs->tokens[i]);
  }
  out += "],\"top_logprobs\":[";
  std::map<std::string_view, float>
      top;  // sorted and one entry per text, as nlohmann and Python dicts have it
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    top.clear();
    top.emplace(logprobs->tokens[i], logprobs->logprobs[i]);  // the sampled token, always there
    if (i < logprobs->top.size()) {
      for (const Alternative& alternative : logprobs->top[i])
        top.emplace(alternative.token, alternative.logprob);
    }
    out += '{';
    bool first = true;
    for (const auto& [token, logprob] : top) {
      if (!first) out += ',';
      first = false;
      put_string(out, token);
      out += ':';
      put_logprob(out, logprob);
    }
    out += '}';
  }
  out += "]}";
}

}  // namespace

std::string chat_completion_json(const Completion& c, const std::string& model, const AnswerExtras& extras) {
  std::string out;
  out.reserve(256 + c.reply.content.size() + c.id.size() + model.size());
  out += "{\"choices\":[{\"finish_reason\":";
  put_string(out, c.finish_reason);
  out += ",\"index\":0,\"logprobs\":";
  put_chat_logprobs(out, extras.logprobs);
  out += ",\"message\":{\"content\":";
  if (!c.reply.tool_calls.empty() && c.reply.content.empty())
    out += "null";
  else
    put_string(out, c.reply.content);
  out += ",\"role\":\"assistant\"";
  if (!c.reply.tool_calls.empty()) {
    out += ",\"tool_calls\":[";
    for (size_t i = 0; i < c.reply.tool_calls.size(); ++i) {
      const ToolCall& call = c.reply.tool_calls[i];
      if (i) out += ',';
      out += "{\"function\":{\"arguments\":";
      put_string(out, call.arguments);
      out += ",\"name\":";
      put_string(out, call.name);
      out += "},\"id\":";
      put_string(out, call.id);
      out += ",\"type\":\"function\"}";
    }
    out += ']';
  }
  out += '}';
  if (extras.token_ids) put_ids(out, ",\"token_ids\":", c.ids);
  out += "}],";
  put_header(out, c, model, "chat.completion");
  if (extras.token_ids) put_prompt_ids(out, c);
  put_usage(out, c);
  out += '}';
  return out;
}

namespace {

// One chunk of a stream: data: {"choices":[{CHOICE}],"created":..,"id":..,"model":..,"object":..[,"usage":
// null]} (the choice's members are written by `choice`, sorted as the rest).
// With `prompt_ids`, the chunk also carries "prompt_token_ids" (a chat stream's first chunk).
template <class Choice>
void put_chunk(std::string& out, const Completion& c, const std::string& model, std::string_view object,
               bool include_usage, Choice choice, bool prompt_ids = false) {
  out += "data: {\"choices\":[{";
  choice();
  out += "}],";
  put_header(out, c, model, object);
  if (prompt_ids) put_prompt_ids(out, c);
  if (include_usage)
    out += "\"usage\":null";
  else
    out.pop_back();  // the header's ','
  out += "}\n\n";
}

// The usage chunk that ends a stream when asked: no choices, the usage.
void put_usage_chunk(std::string& out, const Completion& c, const std::string& model,
                     std::string_view object) {
  out += "data: {\"choices\":[],";
  put_header(out, c, model, object);
  put_usage(out, c);
  out += "}\n\n";
}

}  // namespace

std::string chat_completion_sse(const Completion& c, const std::string& model, bool include_usage,
                                const AnswerExtras& extras) {
  // By hand (answer_writer.h), as chat_completion_json.
  std::string out;
  out.reserve(1024 + 2 * c.reply.content.size());
  constexpr std::string_view kObject = "chat.completion.chunk";
  constexpr std::string_view kNoFinish = ",\"finish_reason\":null,\"index\":0,\"logprobs\":null";
  // The log-prob entries and the sampled ids ride on the first chunk with sampled text (openai_codec.h).
  bool pending = true;
  const auto carried = [&] {
    put_chat_logprobs(out, pending ? extras.logprobs : nullptr);
    if (pending && extras.token_ids) put_ids(out, ",\"token_ids\":", c.ids);
    pending = false;
  };
  const auto no_finish = [&] {
    out += ",\"finish_reason\":null,\"index\":0,\"logprobs\":";
    carried();
  };
  put_chunk(
      out, c, model, kObject, include_usage,
      [&] {
        out += "\"delta\":{\"content\":\"\",\"role\":\"assistant\"}";
        out += kNoFinish;
      },
      extras.token_ids);
  if (!c.reply.content.empty()) {
    put_chunk(out, c, model, kObject, include_usage, [&] {
      out += "\"delta\":{\"content\":";
      put_string(out, c.reply.content);
      out += '}';
      no_finish();
    });
  }
  for (size_t i = 0; i < c.reply.tool_calls.size(); ++i) {
    const ToolCall& call = c.reply.tool_calls[i];
    put_chunk(out, c, model, kObject, include_usage, [&] {
      out += "\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":";
      put_string(out, call.arguments);
      out += ",\"name\":";
      put_string(out, call.name);
      out += "},\"id\":";
      put_string(out, call.id);
      out += ",\"index\":";
      append_json_int(out, static_cast<int64_t>(i));
      out += ",\"type\":\"function\"}]}";
      no_finish();
    });
  }
  put_chunk(out, c, model, kObject, include_usage, [&] {
    out += "\"delta\":{},\"finish_reason\":";
    put_string(out, c.finish_reason);
    out += ",\"index\":0,\"logprobs\":";
    carried();
  });
  if (include_usage) put_usage_chunk(out, c, model, kObject);
  append_sse_data(out, "[DONE]");
  return out;
}

std::string text_completion_json(const Completion& c, const std::string& model, const AnswerExtras& extras) {
  std::string out;
  out.reserve(256 + c.reply.content.size() + c.id.size() + model.size());
  out += "{\"choices\":[{\"finish_reason\":";
  put_string(out, c.finish_reason);
  out += ",\"index\":0,\"logprobs\":";
  put_text_logprobs(out, extras.logprobs);
  if (extras.token_ids) put_prompt_ids(out, c, false);
  out += ",\"text\":";
  put_string(out, c.reply.content);
  if (extras.token_ids) put_ids(out, ",\"token_ids\":", c.ids);
  out += "}],";
  put_header(out, c, model, "text_completion");
  put_usage(out, c);
  out += '}';
  return out;
}

std::string text_completion_sse(const Completion& c, const std::string& model, bool include_usage,
                                const AnswerExtras& extras) {
  // By hand (answer_writer.h), as text_completion_json; the first chunk (the text's, else the finish chunk)
  // carries the log-prob entries and the ids.
  std::string out;
  out.reserve(768 + 2 * c.reply.content.size());
  constexpr std::string_view kObject = "text_completion";
  bool first = true;
  const auto text = [&](std::string_view text) {
    out += ",\"index\":0,\"logprobs\":";
    put_text_logprobs(out, first ? extras.logprobs : nullptr);
    if (first && extras.token_ids) put_prompt_ids(out, c, false);
    out += ",\"text\":";
    put_string(out, text);
    if (first && extras.token_ids) put_ids(out, ",\"token_ids\":", c.ids);
    first = false;
  };
  if (!c.reply.content.empty()) {
    put_chunk(out, c, model, kObject, include_usage, [&] {
      out += "\"finish_reason\":null";
      text(c.reply.content);
    });
  }
  put_chunk(out, c, model, kObject, include_usage, [&] {
    out += "\"finish_reason\":";
    put_string(out, c.finish_reason);
    text("");
  });
  if (include_usage) put_usage_chunk(out, c, model, kObject);
  append_sse_data(out, "[DONE]");
  return out;
}

std::string openai_error_json(const GatewayError& e) {
  const json out = {{"error",
                     {{"message", e.what()},
                      {"type", e.type()},
                      {"param", e.param().empty() ? json(nullptr) : json(e.param())},
                      {"code", e.code()}}}};
  return json_text(out);
}

}  // namespace crl::server::gateway
