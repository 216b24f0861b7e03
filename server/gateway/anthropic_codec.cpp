#include "server/gateway/anthropic_codec.h"

#include <optional>

#include "engine/json_escape.h"
#include "engine/json_reader.h"
#include "engine/json_text.h"
#include "engine/sse.h"
#include "server/gateway/answer_writer.h"
#include "server/gateway/openai_codec.h"

namespace crl::server::gateway {

using json = nlohmann::json;

namespace {

// The text of `where`[i], which must be a text block.
std::string_view text_of_block(JsonView block, const std::string& where, size_t i) {
  const JsonView text = block.find("text");
  if (string_or_empty(block, "type") != "text" || !text.is_string()) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    throw bad_request("bad_content", at + " must be a text block {\"type\": \"text\", \"text\"}", at);
  }
  return text.string();
}

// The text a tool_reference block stands for in a tool result. Claude Code's ToolSearch tool answers with
// such blocks (`{"type": "tool_reference", "tool_name": "TaskCreate"}`), and Anthropic's API then shows the
// model the named tool, which the request's tools list holds with `defer_loading: true`. A chat template
// shows every tool of the list (deferral is not emulated: the tools block would change with every tool
// found, an edited history each time), so the model already has the definition, and the block is this line.
constexpr std::string_view kToolLoaded = "Tool loaded: ";

// A tool_result's content: a string, or a list of text and tool_reference blocks, as text: the blocks joined
// by "\n" (as vLLM's Messages API joins them).
std::string tool_result_text(JsonView content, const std::string& where) {
  if (content.is_string()) return std::string(content.string());
  if (!content.is_array())
    throw bad_request("bad_content", where + " must be a string or a list of blocks", where);
  std::string text;
  size_t i = 0;
  for (const JsonView block : content) {
    if (i > 0) text += '\n';
    const std::string_view type = string_or_empty(block, "type");
    const JsonView value = block.find(type == "tool_reference" ? "tool_name" : "text");
    if ((type != "text" && type != "tool_reference") || !value.is_string()) {
      const std::string at = where + "[" + std::to_string(i) + "]";
      throw bad_request("bad_content",
                        at +
                            " must be a text block {\"type\": \"text\", \"text\"} or a tool_reference block "
                            "{\"type\": \"tool_reference\", \"tool_name\"} (" +
                            quote(text_prefix(type)) + ")",
                        at);
    }
    if (type == "tool_reference") text += kToolLoaded;
    text += value.string();
    ++i;
  }
  return text;
}

// Claude Code's attribution line, the first text block of its system prompt: "x-anthropic-billing-header:
// cc_version=...; cc_entrypoint=...; cch=...;", where cch is a hash of that request, so the block differs
// on every call. Anthropic's API reads it and it is not the model's; kept, it would make every call of a
// session an edited history (a new part, the whole history rendered again) and show the model a hash.
// Dropped, as vLLM's Messages API drops it.
constexpr std::string_view kBillingHeader = "x-anthropic-billing-header";

// `text` without the attribution line when it starts with it (the line and its newline; the rest of the
// text is kept).
std::string_view without_attribution(std::string_view text) {
  if (!text.starts_with(kBillingHeader)) return text;
  const size_t eol = text.find('\n');
  return eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
}

// A system prompt (the top-level `system`, or a `role: "system"` message's content): a string, or text
// blocks joined by "" (vLLM's Messages API joins them so); without the attribution line (at the start of the
// string or of a block: vLLM drops such a block whole, and the line is all Claude Code's block holds).
// nullopt when nothing but that line was there.
std::optional<std::string> system_text(JsonView content, const std::string& where) {
  if (content.is_string()) {
    const std::string_view text = without_attribution(content.string());
    if (text.empty() && !content.string().empty()) return std::nullopt;
    return std::string(text);
  }
  if (!content.is_array())
    throw bad_request("bad_content", where + " must be a string or a list of blocks", where);
  std::string text;
  bool dropped = false, kept = false;
  size_t i = 0;
  for (const JsonView block : content) {
    const std::string_view block_text = text_of_block(block, where, i++);
    const std::string_view part = without_attribution(block_text);
    if (part.size() != block_text.size()) {
      dropped = true;
      if (part.empty()) continue;
    }
    kept = true;
    text += part;
  }
  if (dropped && !kept) return std::nullopt;
  return text;
}

void add_turn(JsonView message, const std::string& where, std::vector<Message>& out) {
  const JsonView role_value = message.find("role");
  if (!role_value.is_string()) throw bad_request("bad_role", where + ".role is missing", where + ".role");
  const std::string_view role = role_value.string();
  if (role != "user" && role != "assistant" && role != "system") {
    throw bad_request("bad_role",
                      where + ".role " + quote(text_prefix(role)) + " is not one of user, assistant, system",
                      where + ".role");
  }
  const JsonView content = message.find("content");
  if (!content.exists()) throw bad_request("bad_content", where + ".content is missing", where + ".content");
  const std::string at = where + ".content";
  if (role == "system") {
    // A mid-conversation system message (Anthropic's, which Claude Code sends its reminders and hooks'
    // context as since 2.1.154): a system message where it stands, so the conversation still only grows at
    // its end (vLLM's Messages API moves it into the leading system prompt instead, which would change the
    // window's first message, an edited history, at every new one). A template that takes system messages
    // only first refuses it (a 400 naming the template's error).
    if (std::optional<std::string> text = system_text(content, at))
      out.push_back(Message{MessageRole::kSystem, std::move(*text), {}, {}});
    return;
  }
  if (content.is_string()) {
    out.push_back(Message{role == "user" ? MessageRole::kUser : MessageRole::kAssistant,
                          std::string(content.string()),
                          {},
                          {}});
    return;
  }
  if (!content.is_array()) throw bad_request("bad_content", at + " must be a string or a list of blocks", at);
  if (role == "assistant") {
    Message assistant{MessageRole::kAssistant, "", {}, {}};
    size_t i = 0;
    for (const JsonView block : content) {
      const std::string_view type = string_or_empty(block, "type");
      const JsonView text = block.find("text"), name = block.find("name");
      if (type == "text" && text.is_string()) {
        // (text blocks joined by "\n", empty ones skipped, as vLLM's Messages API passes them on)
        if (!text.string().empty() && !assistant.content.empty()) assistant.content += '\n';
        assistant.content += text.string();
      } else if (type == "tool_use" && name.is_string()) {
        const JsonView input = block.find("input");
        assistant.tool_calls.push_back(ToolCall{std::string(string_or_empty(block, "id")),
                                                std::string(name.string()),
                                                input.exists() ? input.to_json().dump() : "{}"});
      } else if (type != "thinking" && type != "redacted_thinking") {
        const std::string b = at + "[" + std::to_string(i) + "]";
        throw bad_request("bad_content", b + " must be a text or tool_use block", b);
      }
      ++i;
    }
    out.push_back(std::move(assistant));
    return;
  }
  std::string text;
  const auto flush = [&] {
    if (!text.empty()) out.push_back(Message{MessageRole::kUser, std::move(text), {}, {}});
    text.clear();
  };
  size_t i = 0;
  for (const JsonView block : content) {
    const std::string b = at + "[" + std::to_string(i++) + "]";
    const std::string_view type = string_or_empty(block, "type");
    const JsonView block_text_value = block.find("text");
    if (type == "text" && block_text_value.is_string()) {
      // (joined by "\n", empty ones skipped, as vLLM's Messages API passes a turn's text blocks on)
      if (!block_text_value.string().empty() && !text.empty()) text += '\n';
      text += block_text_value.string();
    } else if (type == "tool_result") {
      flush();
      Message result{MessageRole::kTool, "", {}, std::string(string_or_empty(block, "tool_use_id"))};
      if (const JsonView inner = block.find("content"); inner.exists())
        result.content = tool_result_text(inner, b + ".content");
      if (const JsonView is_error = block.find("is_error"); is_error.is_bool() && is_error.boolean())
        result.content = "Error: " + result.content;
      out.push_back(std::move(result));
    } else {
      throw bad_request("bad_content",
                        b + " must be a text or tool_result block (" + quote(text_prefix(type)) + ")", b);
    }
  }
  flush();
}

const char* stop_reason(const Completion& c) {
  if (!c.stop_sequence.empty()) return "stop_sequence";
  if (c.finish_reason == "length") return "max_tokens";
  if (c.finish_reason == "tool_calls") return "tool_use";
  return "end_turn";
}

// "stop_reason":R,"stop_sequence":S (null when none matched).
void put_stop(std::string& out, const Completion& c) {
  out += "\"stop_reason\":";
  put_string(out, stop_reason(c));
  out += ",\"stop_sequence\":";
  if (c.stop_sequence.empty())
    out += "null";
  else
    put_string(out, c.stop_sequence);
}

std::string message_id(const Completion& c) {
  return "msg_" + std::string(id_suffix(c));
}

}  // namespace

namespace {

// Anthropic tools as the chat template takes them: OpenAI function tools.
nlohmann::ordered_json anthropic_tools(JsonView tools) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  size_t t = 0;
  for (const JsonView tool : tools) {
    const JsonView name = tool.find("name");
    if (!name.is_string())
      throw bad_request("bad_tools", "tools[" + std::to_string(t) + "] needs a name", "tools");
    nlohmann::ordered_json function = {{"name", name.to_ordered_json()}};
    if (const JsonView description = tool.find("description"); description.exists())
      function["description"] = description.to_ordered_json();
    const JsonView schema = tool.find("input_schema");
    function["parameters"] = schema.exists() ? schema.to_ordered_json() : nlohmann::ordered_json::object();
    out.push_back({{"type", "function"}, {"function", function}});
    ++t;
  }
  return out;
}

void anthropic_element(JsonView element, size_t index, const Message*, std::vector<Message>& out) {
  add_turn(element, "messages[" + std::to_string(index) + "]", out);
}

// The whole body; with `layout`, where its messages lie, and with `kept`, its tools go there
// (KeptRequest::see_tools).
MessagesRequest read_whole_messages(std::string_view body, bool count_only, MessagesLayout* layout,
                                    KeptRequest* kept) {
  const JsonDocument doc = read_request_body(body);
  const JsonView request = doc.root();
  MessagesRequest out;
  if (const JsonView system = request.find("system"); !system.is_none()) {
    if (std::optional<std::string> text = system_text(system, "system"))
      out.turn.messages.push_back(Message{MessageRole::kSystem, std::move(*text), {}, {}});
  }
  const JsonView messages = request.find("messages");
  if (!messages.is_array())
    throw bad_request("bad_messages", "messages must be a list of messages", "messages");
  if (layout) {
    layout->lead = out.turn.messages.size();
    layout->list_open = static_cast<size_t>(messages.raw().data() - body.data());
  }
  size_t i = 0;
  for (const JsonView message : messages) {
    anthropic_element(message, i++, nullptr, out.turn.messages);
    if (layout) layout->add(message, body.data(), out.turn.messages.size());
  }
  read_tools(request, anthropic_tools, kept, out.turn);
  const JsonView max_tokens = request.find("max_tokens");
  if (!count_only) {
    if (!max_tokens.is_integer() || max_tokens.integer() < 1)
      throw bad_request("bad_field", "max_tokens is required: an integer >= 1", "max_tokens");
    out.turn.max_tokens = max_tokens.integer();
  }
  if (const JsonView stop = request.find("stop_sequences"); stop.exists())
    out.turn.stop = parse_stop(stop, "stop_sequences", false);
  out.turn.tool_choice = read_anthropic_tool_choice(request);
  // thinking {"type": "enabled", "budget_tokens": N} (or "adaptive"): the answer shows the reasoning as a
  // thinking block; absent or "disabled": not shown (it is sampled and recorded either way: the model's
  // template decides whether it thinks).
  out.show_reasoning = false;
  if (const JsonView thinking = request.find("thinking"); !thinking.is_none()) {
    const JsonView type = thinking.find("type");
    const std::string_view kind = type.is_string() ? type.string() : "";
    if (kind != "enabled" && kind != "adaptive" && kind != "disabled") {
      throw bad_request("bad_field", "thinking.type must be enabled, adaptive or disabled", "thinking.type");
    }
    out.show_reasoning = kind != "disabled";
  }
  for (const char* key : {"temperature", "top_p"}) {
    const JsonView it = request.find(key);
    if (it.is_none()) continue;
    if (!it.is_number()) throw bad_request("bad_field", std::string(key) + " must be a number", key);
    (std::string_view(key) == "temperature" ? out.turn.temperature : out.turn.top_p) = it.number();
  }
  if (const JsonView top_k = request.find("top_k"); top_k.is_integer())
    out.turn.top_k = static_cast<int>(top_k.integer());
  if (const JsonView stream = request.find("stream"); stream.is_bool()) out.stream = stream.boolean();
  if (const JsonView model = request.find("model"); model.is_string()) out.model = model.string();
  return out;
}

}  // namespace

MessagesRequest parse_messages_request(std::string_view body, bool count_only) {
  return read_whole_messages(body, count_only, nullptr, nullptr);
}

MessagesRequest parse_messages_request(std::string_view body, KeptRequest& kept) {
  std::optional<MessagesRequest> out;
  // Only the middle (kept_request.h, step 1): the system and tools may follow the list, so a body whose
  // tail changed decodes whole.
  if (const KeptRequest::Repeat repeat = kept.repeated(body, BodyApi::kAnthropicMessages);
      repeat.elements > 0)
    out = kept.decode_middle(body, repeat, anthropic_element);
  if (!out) {
    MessagesLayout layout;
    out = read_whole_messages(body, false, &layout, &kept);
    kept.keep_whole(body, BodyApi::kAnthropicMessages, std::move(layout), *out);
  }
  kept.lend(out->turn);
  return std::move(*out);
}

std::string anthropic_message_json(const Completion& c, const std::string& model) {
  // By hand (answer_writer.h): {"content":[...],"id","model","role","stop_reason","stop_sequence","type",
  // "usage":{...}}, keys sorted as nlohmann's dump wrote them.
  std::string out;
  out.reserve(256 + c.reply.content.size() + c.id.size() + model.size());
  out += "{\"content\":[";
  bool first = true;
  if (!c.reply.reasoning.empty()) {  // (shown when the request enabled thinking: Gateway::messages)
    out += "{\"signature\":\"\",\"thinking\":";
    put_string(out, c.reply.reasoning);
    out += ",\"type\":\"thinking\"}";
    first = false;
  }
  if (has_text_part(c)) {
    if (!first) out += ',';
    out += "{\"text\":";
    put_string(out, c.reply.content);
    out += ",\"type\":\"text\"}";
    first = false;
  }
  for (const ToolCall& call : c.reply.tool_calls) {
    if (!first) out += ',';
    first = false;
    out += "{\"id\":";
    put_string(out, call.id);
    out += ",\"input\":";
    out += json_text(tool_input(call));
    out += ",\"name\":";
    put_string(out, call.name);
    out += ",\"type\":\"tool_use\"}";
  }
  out += "],\"id\":";
  put_string(out, message_id(c));
  out += ",\"model\":";
  put_string(out, model);
  out += ",\"role\":\"assistant\",";
  put_stop(out, c);
  out += ",\"type\":\"message\",\"usage\":{\"cache_read_input_tokens\":";
  append_json_int(out, c.cached_tokens);
  out += ",\"input_tokens\":";
  append_json_int(out, c.prompt_tokens);
  out += ",\"output_tokens\":";
  append_json_int(out, c.completion_tokens);
  out += "}}";
  return out;
}

namespace {

// "event: NAME\ndata: {": the payload's members and its end are written by the caller.
void open_event(std::string& out, std::string_view name) {
  out += "event: ";
  out += name;
  out += "\ndata: {";
}

// "index":N,"type":TYPE}\n\n: the end of a content block's event.
void close_block_event(std::string& out, size_t index, std::string_view type) {
  out += "\"index\":";
  append_json_int(out, static_cast<int64_t>(index));
  out += ",\"type\":\"";
  out += type;
  out += "\"}\n\n";
}

}  // namespace

namespace {
// The stream's first event: the message, empty, with the prompt's counts.
void put_message_start(std::string& out, const Completion& c, const std::string& model) {
  open_event(out, "message_start");
  out += "\"message\":{\"content\":[],\"id\":";
  put_string(out, message_id(c));
  out += ",\"model\":";
  put_string(out, model);
  out += ",\"role\":\"assistant\",\"stop_reason\":null,\"stop_sequence\":null,\"type\":\"message\",";
  out += "\"usage\":{\"cache_read_input_tokens\":";
  append_json_int(out, c.cached_tokens);
  out += ",\"input_tokens\":";
  append_json_int(out, c.prompt_tokens);
  out += ",\"output_tokens\":0}},\"type\":\"message_start\"}\n\n";
}

// A content block's events: its start (`start` writes the block), its delta (`delta` writes the delta
// object; none when null), its stop.
template <typename Start>
void put_block_start(std::string& out, size_t index, const Start& start) {
  open_event(out, "content_block_start");
  out += "\"content_block\":{";
  start();
  out += "},";
  close_block_event(out, index, "content_block_start");
}
template <typename Delta>
void put_block_delta(std::string& out, size_t index, const Delta& delta) {
  open_event(out, "content_block_delta");
  out += "\"delta\":{";
  delta();
  out += "},";
  close_block_event(out, index, "content_block_delta");
}
void put_block_stop(std::string& out, size_t index) {
  open_event(out, "content_block_stop");
  close_block_event(out, index, "content_block_stop");
}

// A text delta: {"<key>":TEXT,"type":"<key>_delta"} (key: thinking | text).
void put_text_delta(std::string& out, size_t index, std::string_view key, std::string_view text) {
  put_block_delta(out, index, [&] {
    out += '"';
    out += key;
    out += "\":";
    put_string(out, text);
    out += ",\"type\":\"";
    out += key;
    out += "_delta\"";
  });
}

void put_thinking_start(std::string& out, size_t index) {
  put_block_start(out, index, [&] { out += "\"signature\":\"\",\"thinking\":\"\",\"type\":\"thinking\""; });
}
void put_thinking_delta(std::string& out, size_t index, std::string_view text) {
  put_text_delta(out, index, "thinking", text);
}
// A thinking block's end: its (empty: the gateway cannot sign) signature, then its stop.
void put_thinking_stop(std::string& out, size_t index) {
  put_block_delta(out, index, [&] { out += "\"signature\":\"\",\"type\":\"signature_delta\""; });
  put_block_stop(out, index);
}
void put_text_start(std::string& out, size_t index) {
  put_block_start(out, index, [&] { out += "\"text\":\"\",\"type\":\"text\""; });
}
void put_text_delta(std::string& out, size_t index, std::string_view text) {
  put_text_delta(out, index, "text", text);
}
}  // namespace

void anthropic_message_delta(std::string& out, const Completion& header, const std::string& model,
                             StreamShown& shown, std::string_view reasoning, std::string_view content) {
  // The blocks as the whole stream numbers them: a thinking block (index 0) when the reasoning shows, then
  // the text block.
  if (!shown.opened) put_message_start(out, header, model);
  if (!reasoning.empty()) {
    if (shown.reasoning == 0) put_thinking_start(out, 0);
    put_thinking_delta(out, 0, reasoning);
  }
  if (content.empty()) return;
  const bool thinking = shown.reasoning > 0 || !reasoning.empty();
  const size_t text = thinking ? 1 : 0;
  if (shown.content == 0) {
    if (thinking) put_thinking_stop(out, 0);  // (the reasoning is whole once the content shows)
    put_text_start(out, text);
  }
  put_text_delta(out, text, content);
}

std::string anthropic_message_sse(const Completion& c, const std::string& model, const StreamShown& shown) {
  // By hand (answer_writer.h), as anthropic_message_json: every payload's keys sorted. What went out while
  // the answer was sampled (`shown`: the message_start, a thinking block's start and text, the text block's
  // start and text, the thinking block's end once the text began) is not sent again.
  std::string out;
  out.reserve(2048 + 2 * c.reply.content.size() + 2 * c.reply.reasoning.size());
  if (!shown.opened) put_message_start(out, c, model);
  size_t index = 0;
  if (!c.reply.reasoning.empty()) {
    if (shown.content == 0) {  // (else the thinking block ended when the text began)
      if (shown.reasoning == 0) put_thinking_start(out, index);
      if (const std::string_view rest = rest_of(c.reply.reasoning, shown.reasoning); !rest.empty())
        put_thinking_delta(out, index, rest);
      put_thinking_stop(out, index);
    }
    ++index;
  }
  if (has_text_part(c)) {
    if (shown.content == 0) put_text_start(out, index);
    // (a text block with no text still has its one delta, as the API sends it)
    if (const std::string_view rest = rest_of(c.reply.content, shown.content);
        !rest.empty() || shown.content == 0)
      put_text_delta(out, index, rest);
    put_block_stop(out, index);
    ++index;
  }
  for (const ToolCall& call : c.reply.tool_calls) {
    put_block_start(out, index, [&] {
      out += "\"id\":";
      put_string(out, call.id);
      out += ",\"input\":{},\"name\":";
      put_string(out, call.name);
      out += ",\"type\":\"tool_use\"";
    });
    put_block_delta(out, index, [&] {
      out += "\"partial_json\":";
      put_string(out, tool_input(call).dump());
      out += ",\"type\":\"input_json_delta\"";
    });
    put_block_stop(out, index);
    ++index;
  }
  open_event(out, "message_delta");
  out += "\"delta\":{";
  put_stop(out, c);
  out += "},\"type\":\"message_delta\",\"usage\":{\"output_tokens\":";
  append_json_int(out, c.completion_tokens);
  out += "}}\n\n";
  append_sse_event(out, "message_stop", "{\"type\":\"message_stop\"}");
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
  return json_text(
      json{{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}, {"code", e.code()}}}});
}

}  // namespace crl::server::gateway
