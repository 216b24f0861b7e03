#include "server/gateway/responses_codec.h"

#include <optional>

#include "engine/json_escape.h"
#include "engine/json_text.h"
#include "engine/sse.h"
#include "server/gateway/answer_writer.h"
#include "server/gateway/openai_answer.h"
#include "server/gateway/openai_codec.h"
#include "server/gateway/template_kwargs.h"

namespace crl::server::gateway {

namespace {

// An item's path for an error ("input[3].content[1]"), written only when there is an error.
struct ItemPath {
  size_t index;
  std::string operator()(const std::string& suffix = "") const {
    return "input[" + std::to_string(index) + "]" + suffix;
  }
};

// A string, or a list of text parts (input_text, output_text: their text; refusal: its refusal), as text.
std::string parts_text(JsonView content, const ItemPath& where, const std::string& field) {
  if (content.is_string()) return std::string(content.string());
  if (!content.is_array())
    throw bad_request("bad_content", where(field + " must be a string or a list of text parts"),
                      where(field));
  std::string text;
  size_t i = 0;
  for (const JsonView part : content) {
    const std::string_view type = string_or_empty(part, "type");
    const JsonView value = part.find(type == "refusal" ? "refusal" : "text");
    if ((type != "input_text" && type != "output_text" && type != "refusal") || !value.is_string()) {
      const std::string at = where(field + "[" + std::to_string(i) + "]");
      throw bad_request("bad_content",
                        at + " must be an input_text, output_text or refusal part with its text (" +
                            quote(text_prefix(type)) + "; images, files and audio are not accepted)",
                        at);
    }
    if (i > 0) text += '\n';  // (parts joined as vLLM joins them)
    text += value.string();
    ++i;
  }
  return text;
}

MessageRole message_role(JsonView item, const ItemPath& where) {
  const JsonView role = item.find("role");
  if (!role.is_string()) throw bad_request("bad_role", where(".role is missing"), where(".role"));
  const std::string_view name = role.string();
  if (name == "user") return MessageRole::kUser;
  if (name == "assistant") return MessageRole::kAssistant;
  if (name == "system" || name == "developer") return MessageRole::kSystem;
  throw bad_request(
      "bad_role",
      where(".role ") + quote(text_prefix(name)) + " is not one of user, assistant, system, developer",
      where(".role"));
}

ToolCall function_call(JsonView item, const ItemPath& where) {
  const JsonView name = item.find("name");
  if (!name.is_string())
    throw bad_request("bad_input", where(".name must be the function's name"), where(".name"));
  ToolCall call;
  call.id = string_or_empty(item, "call_id");
  call.name = name.string();
  const JsonView arguments = item.find("arguments");
  call.arguments = arguments.is_none()     ? "{}"
                   : arguments.is_string() ? std::string(arguments.string())
                                           : arguments.to_json().dump();
  return call;
}

// input[index], appended to `out` (responses_codec.h); `before` as KeptRequest's ElementDecoder has it.
void responses_item(JsonView item, size_t index, const Message* before, std::vector<Message>& out) {
  const ItemPath where{index};
  if (!item.is_object()) throw bad_request("bad_input", where(" must be an object"), where());
  const JsonView type = item.find("type");
  if (!type.is_none() && !type.is_string())
    throw bad_request("bad_input", where(".type must be a string"), where(".type"));
  const std::string_view kind = type.is_string() ? type.string() : "message";
  if (kind == "message") {
    const MessageRole role = message_role(item, where);
    const JsonView content = item.find("content");
    if (!content.exists()) throw bad_request("bad_content", where(".content is missing"), where(".content"));
    out.push_back(Message{role, parts_text(content, where, ".content"), {}, {}});
  } else if (kind == "function_call") {
    ToolCall call = function_call(item, where);
    const Message* last = out.empty() ? before : &out.back();
    if (last && last->role == MessageRole::kAssistant) {
      if (out.empty()) throw NeedsEarlierMessages{};  // it joins a kept message: decode the body whole
      out.back().tool_calls.push_back(std::move(call));
    } else {
      out.push_back(Message{MessageRole::kAssistant, "", {std::move(call)}, {}});
    }
  } else if (kind == "function_call_output") {
    const JsonView output = item.find("output");
    if (!output.exists()) throw bad_request("bad_input", where(".output is missing"), where(".output"));
    out.push_back(Message{MessageRole::kTool,
                          parts_text(output, where, ".output"),
                          {},
                          std::string(string_or_empty(item, "call_id"))});
  } else if (kind != "reasoning") {
    throw bad_request("bad_input",
                      where(".type ") + quote(text_prefix(kind)) +
                          " is not one of message, function_call, function_call_output, reasoning (stored "
                          "items and built-in tools are not served)",
                      where(".type"));
  }
}

// Responses tools as the chat template takes them: OpenAI chat function tools.
nlohmann::ordered_json responses_tools(JsonView tools) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  size_t t = 0;
  for (const JsonView tool : tools) {
    const std::string at = "tools[" + std::to_string(t++) + "]";
    const std::string_view type = string_or_empty(tool, "type");
    if (type != "function") {
      throw bad_request("bad_tools",
                        at + ".type " + quote(text_prefix(type)) +
                            " is not served: only function tools (the model's chat template renders them)",
                        at + ".type");
    }
    const JsonView name = tool.find("name");
    if (!name.is_string()) throw bad_request("bad_tools", at + " needs a name", at + ".name");
    nlohmann::ordered_json function = {{"name", name.to_ordered_json()}};
    if (const JsonView description = tool.find("description"); !description.is_none())
      function["description"] = description.to_ordered_json();
    const JsonView parameters = tool.find("parameters");
    function["parameters"] =
        parameters.is_none() ? nlohmann::ordered_json::object() : parameters.to_ordered_json();
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// text.format as the schema the upstream constrains the answer to ("" for text).
std::string read_text_format(JsonView text) {
  if (!text.is_object()) throw bad_request("bad_field", "text must be an object", "text");
  const JsonView format = text.find("format");
  if (format.is_none()) return "";
  const JsonView type = format.find("type");
  const std::string_view kind = type.is_string() ? type.string() : "";
  if (kind == "text") return "";
  if (kind == "json_object") return R"({"type":"object"})";
  if (kind != "json_schema")
    throw bad_request("bad_field", "text.format.type must be text, json_object or json_schema",
                      "text.format.type");
  const JsonView schema = format.find("schema");
  if (!schema.is_object())
    throw bad_request("bad_field", "text.format.schema must be a JSON schema object", "text.format.schema");
  return json_text(schema.to_ordered_json());
}

void refuse_if_present(JsonView request, const char* key, const char* why) {
  const JsonView value = request.find(key);
  if (!value.is_none() && !(value.is_bool() && !value.boolean()))
    throw bad_request("unsupported_field", std::string(key) + " is not supported: " + why, key);
}

// Everything but the input and the tools.
void read_fields(JsonView request, ResponsesRequest& out) {
  if (const JsonView previous = request.find("previous_response_id"); !previous.is_none()) {
    if (!previous.is_string() || previous.string().empty())
      throw bad_request("bad_field", "previous_response_id must be a response id (a non-empty string)",
                        "previous_response_id");
    out.previous_response_id = previous.string();
  }
  refuse_if_present(request, "conversation",
                    "the gateway keeps no conversation objects; send the whole conversation as input, or "
                    "continue a response with previous_response_id");
  refuse_if_present(request, "background", "an answer is sampled while the call waits");
  if (const JsonView max = request.find("max_output_tokens"); !max.is_none()) {
    if (!max.is_integer() || max.integer() < 1)
      throw bad_request("bad_field", "max_output_tokens must be an integer >= 1", "max_output_tokens");
    out.turn.max_tokens = max.integer();
  }
  out.turn.temperature = number(request, "temperature");
  out.turn.top_p = number(request, "top_p");
  if (const auto top_k = number(request, "top_k")) out.turn.top_k = static_cast<int>(*top_k);
  out.stream = flag(request, "stream").value_or(false);
  if (const JsonView model = request.find("model"); model.is_string()) out.model = model.string();
  out.turn.tool_choice = read_responses_tool_choice(request);
  if (const JsonView text = request.find("text"); !text.is_none())
    out.turn.json_schema = read_text_format(text);
  // include: what the answer carries besides its items. Its logprobs are the one value with an effect here;
  // the others (Codex sends "reasoning.encrypted_content") name what the gateway has none of.
  if (const JsonView include = request.find("include"); !include.is_none()) {
    if (!include.is_array()) throw bad_request("bad_field", "include must be a list of strings", "include");
    size_t i = 0;
    for (const JsonView value : include) {
      if (!value.is_string()) {
        throw bad_request("bad_field", "include[" + std::to_string(i) + "] must be a string",
                          "include[" + std::to_string(i) + "]");
      }
      out.logprobs.on |= value.string() == "message.output_text.logprobs";
      ++i;
    }
  }
  // Alternatives are asked of the upstream only when the answer shows the logprobs.
  if (const std::optional<int> top = alternatives(request, "top_logprobs"); top && out.logprobs.on)
    out.turn.top_logprobs = *top;
  if (const JsonView reasoning = request.find("reasoning"); !reasoning.is_none()) {
    if (!reasoning.is_object())
      throw bad_request("bad_field", "reasoning must be an object ({effort, summary})", "reasoning");
    add_reasoning_effort(out.turn.template_kwargs, reasoning.find("effort"), "reasoning.effort");
  }
}

// The whole body; with `layout`, where its input items lie, and with `kept`, its tools go there.
ResponsesRequest read_whole_responses(std::string_view body, MessagesLayout* layout, KeptRequest* kept) {
  // Tools the session decoded before are not read again when their text repeats (a chained call's body is
  // read whole: its tools are most of it).
  const std::optional<JsonKnownMember> known = kept ? kept->known_tools(responses_tools) : std::nullopt;
  const JsonDocument doc = read_request_body(body, known ? &*known : nullptr);
  const JsonView request = doc.root();
  ResponsesRequest out;
  if (const JsonView instructions = request.find("instructions"); !instructions.is_none()) {
    if (!instructions.is_string())
      throw bad_request("bad_field", "instructions must be a string", "instructions");
    out.turn.messages.push_back(Message{MessageRole::kSystem, std::string(instructions.string()), {}, {}});
    out.instruction_messages = 1;
  }
  const JsonView input = request.find("input");
  if (input.is_string()) {
    out.turn.messages.push_back(Message{MessageRole::kUser, std::string(input.string()), {}, {}});
  } else if (input.is_array()) {
    if (input.size() == 0) throw bad_request("bad_input", "input is empty: give at least one item", "input");
    if (layout) {
      layout->lead = out.turn.messages.size();
      layout->list_open = static_cast<size_t>(input.raw().data() - body.data());
    }
    size_t i = 0;
    for (const JsonView item : input) {
      responses_item(item, i++, nullptr, out.turn.messages);
      if (layout) layout->add(item, body.data(), out.turn.messages.size());
    }
  } else {
    throw bad_request("bad_input", "input must be a string or a list of items", "input");
  }
  read_tools(request, responses_tools, kept, out.turn);
  read_fields(request, out);
  return out;
}

}  // namespace

ResponsesRequest parse_responses_request(std::string_view body) {
  return read_whole_responses(body, nullptr, nullptr);
}

ResponsesRequest parse_responses_request(std::string_view body, KeptRequest& kept) {
  std::optional<ResponsesRequest> out;
  // Only the middle (kept_request.h, step 1): instructions and tools may follow the list, so a body whose
  // tail changed decodes whole.
  if (const KeptRequest::Repeat repeat = kept.repeated(body, BodyApi::kOpenAIResponses); repeat.elements > 0)
    out = kept.decode_middle(body, repeat, responses_item);
  if (!out) {
    MessagesLayout layout;
    layout.list_open = std::string_view::npos;
    out = read_whole_responses(body, &layout, &kept);
    // `input` a string, or only what follows a response (response_chain.h): only the tools are kept.
    if (layout.list_open == std::string_view::npos || !out->previous_response_id.empty()) {
      kept.keep_tools_only(out->turn);
      return std::move(*out);
    }
    kept.keep_whole(body, BodyApi::kOpenAIResponses, std::move(layout), *out);
  }
  kept.lend(out->turn);
  return std::move(*out);
}

}  // namespace crl::server::gateway

namespace crl::server::gateway {

namespace {

// The answers are written by hand (answer_writer.h), keys sorted as nlohmann's dump writes them.

bool incomplete(const Completion& c) {
  return c.finish_reason == "length";
}

// "PREFIX<the completion id's suffix>[_CALL]" without a temporary string (an answer writes a dozen ids).
void put_id(std::string& out, std::string_view prefix, const Completion& c, int call = -1) {
  out += '"';
  out += prefix;
  out += id_suffix(c);  // (a session id is 1-128 of [A-Za-z0-9._:-], gateway.h: nothing to escape)
  if (call >= 0) {
    out += '_';
    append_json_int(out, call);
  }
  out += '"';
}

// {"annotations":[],"logprobs":[..],"text":TEXT,"type":"output_text"} ("logprobs" only when asked).
void put_text_part(std::string& out, std::string_view text, const TokenLogprobs* logprobs) {
  out += "{\"annotations\":[],";
  if (logprobs) {
    out += "\"logprobs\":";
    put_token_logprobs(out, *logprobs, true);
    out += ',';
  }
  out += "\"text\":";
  put_string(out, text);
  out += ",\"type\":\"output_text\"}";
}

// The message item; `done`: its content and status completed, else none and in_progress.
void put_message_item(std::string& out, const Completion& c, bool done, const TokenLogprobs* logprobs) {
  out += "{\"content\":[";
  if (done) put_text_part(out, c.reply.content, logprobs);
  out += "],\"id\":";
  put_id(out, "msg_", c);
  out += ",\"role\":\"assistant\",\"status\":";
  out += done ? "\"completed\"" : "\"in_progress\"";
  out += ",\"type\":\"message\"}";
}

// The reasoning item (a thinking model's reasoning, as vLLM answers it: one reasoning_text part, no
// summary); `done`: with its content, else none.
void put_reasoning_item(std::string& out, const Completion& c, bool done) {
  out += "{\"content\":[";
  if (done) {
    out += "{\"text\":";
    put_string(out, c.reply.reasoning);
    out += ",\"type\":\"reasoning_text\"}";
  }
  out += "],\"id\":";
  put_id(out, "rs_", c);
  out += ",\"summary\":[],\"type\":\"reasoning\"}";
}

// Tool call `i`'s function_call item; `done`: its arguments and status completed, else "" and in_progress.
void put_call_item(std::string& out, const Completion& c, size_t i, bool done) {
  const ToolCall& call = c.reply.tool_calls[i];
  out += "{\"arguments\":";
  put_string(out, done ? std::string_view(call.arguments) : std::string_view());
  out += ",\"call_id\":";
  put_string(out, call.id);
  out += ",\"id\":";
  put_id(out, "fc_", c, static_cast<int>(i));
  out += ",\"name\":";
  put_string(out, call.name);
  out += ",\"status\":";
  out += done ? "\"completed\"" : "\"in_progress\"";
  out += ",\"type\":\"function_call\"}";
}

// The response object; `done`: its output, status and usage, else as response.created shows it.
void put_response(std::string& out, const Completion& c, const std::string& model, bool done,
                  const TokenLogprobs* logprobs) {
  out += "{\"created_at\":";
  append_json_int(out, c.created);
  out += ",\"error\":null,\"id\":";
  put_id(out, "resp_", c);
  out += ",\"incomplete_details\":";
  out += done && incomplete(c) ? "{\"reason\":\"max_output_tokens\"}" : "null";
  out += ",\"model\":";
  put_string(out, model);
  out += ",\"object\":\"response\",\"output\":[";
  if (done) {
    bool first = true;
    if (!c.reply.reasoning.empty()) {
      put_reasoning_item(out, c, true);
      first = false;
    }
    if (has_text_part(c)) {
      if (!first) out += ',';
      put_message_item(out, c, true, logprobs);
      first = false;
    }
    for (size_t i = 0; i < c.reply.tool_calls.size(); ++i) {
      if (!first) out += ',';
      first = false;
      put_call_item(out, c, i, true);
    }
  }
  out += "],\"status\":";
  out += !done ? "\"in_progress\"" : incomplete(c) ? "\"incomplete\"" : "\"completed\"";
  out += ",\"usage\":";
  if (!done) {
    out += "null}";
    return;
  }
  out += "{\"input_tokens\":";
  append_json_int(out, c.prompt_tokens);
  out += ",\"input_tokens_details\":{\"cached_tokens\":";
  append_json_int(out, c.cached_tokens);
  out += "},\"output_tokens\":";
  append_json_int(out, c.completion_tokens);
  out += ",\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":";
  append_json_int(out, c.prompt_tokens + c.completion_tokens);
  out += "}}";
}

// A stream's events, numbered in order.
class EventWriter {
 public:
  // `sequence`: the number of the first event (the events a stream already sent).
  explicit EventWriter(std::string& out, int64_t sequence = 0) : out_(out), sequence_(sequence) {}
  int64_t sequence() const { return sequence_; }
  // "event: TYPE\ndata: {" then the payload's members before "sequence_number" (written by the caller),
  // then end().
  void open(std::string_view type) {
    type_ = type;
    out_ += "event: ";
    out_ += type;
    out_ += "\ndata: {";
  }
  // ,"sequence_number":N,<after_number>"type":TYPE}\n\n (`after_number`: the members that sort between).
  void end(std::string_view after_number = "") {
    out_ += ",\"sequence_number\":";
    append_json_int(out_, sequence_++);
    out_ += ',';
    out_ += after_number;
    out_ += "\"type\":";
    put_string(out_, type_);
    out_ += "}\n\n";
  }

 private:
  std::string& out_;
  std::string_view type_;
  int64_t sequence_ = 0;
};

// "item_id":ID,
void put_item_id(std::string& out, std::string_view prefix, const Completion& c, int call = -1) {
  out += "\"item_id\":";
  put_id(out, prefix, c, call);
  out += ',';
}

void put_output_index(std::string& out, size_t index) {
  out += "\"output_index\":";
  append_json_int(out, static_cast<int64_t>(index));
}

}  // namespace

std::string response_id(const Completion& c) {
  std::string out = "resp_";
  out += id_suffix(c);
  return out;
}

std::string response_json(const Completion& c, const std::string& model, const TokenLogprobs* logprobs) {
  std::string out;
  out.reserve(512 + c.reply.content.size() + model.size());
  put_response(out, c, model, true, logprobs);
  return out;
}

namespace {
// The events of the Responses stream, written by hand (answer_writer.h) in the API's order: the response
// created and in progress; per output item (the reasoning, the message, each call) its added event, its
// content's events and its done event; the response completed. Each part can be written on its own, so a
// stream can send the first parts while the answer is sampled (response_delta) and the rest at its end.
class ResponseEvents {
 public:
  ResponseEvents(std::string& out, const Completion& c, const std::string& model,
                 const TokenLogprobs* logprobs, int64_t sequence)
      : out_(out), c_(c), model_(model), logprobs_(logprobs), event_(out, sequence) {}
  int64_t sequence() const { return event_.sequence(); }

  void start() {
    for (const char* type : {"response.created", "response.in_progress"}) {
      event_.open(type);
      out_ += "\"response\":";
      put_response(out_, c_, model_, false, nullptr);
      event_.end();
    }
  }
  void item_added(size_t index, const char* kind, int call = -1) {
    item_event("response.output_item.added", index, kind, false, call);
  }
  void item_done(size_t index, const char* kind, int call = -1) {
    item_event("response.output_item.done", index, kind, true, call);
  }

  void reasoning_delta(size_t index, std::string_view text) {
    delta_event("response.reasoning_text.delta", "rs_", index, text, "");
  }
  void reasoning_done(size_t index) {
    std::string reasoning_member = "\"text\":";  // (sorts after sequence_number)
    put_string(reasoning_member, c_.reply.reasoning);
    reasoning_member += ',';
    event_.open("response.reasoning_text.done");
    out_ += "\"content_index\":0,";
    put_item_id(out_, "rs_", c_);
    put_output_index(out_, index);
    event_.end(reasoning_member);
  }

  void part_added(size_t index) { part_event("response.content_part.added", index, "", false, ""); }
  void text_delta(size_t index, std::string_view text) {
    delta_event("response.output_text.delta", "msg_", index, text, logprobs_member());
  }
  void text_done(size_t index) {
    std::string text_member = "\"text\":";
    put_string(text_member, c_.reply.content);
    text_member += ',';
    part_event("response.output_text.done", index, logprobs_member(), false, text_member);
    part_event("response.content_part.done", index, "", true, "");
  }

  void call(size_t index, size_t i) {
    const int call = static_cast<int>(i);
    item_added(index, "fc_", call);
    for (const bool done : {false, true}) {  // the whole arguments as one delta, then as done
      event_.open(done ? "response.function_call_arguments.done" : "response.function_call_arguments.delta");
      out_ += done ? "\"arguments\":" : "\"delta\":";
      put_string(out_, c_.reply.tool_calls[i].arguments);
      out_ += ',';
      put_item_id(out_, "fc_", c_, call);
      put_output_index(out_, index);
      event_.end();
    }
    item_done(index, "fc_", call);
  }
  void finish() {
    event_.open(incomplete(c_) ? "response.incomplete" : "response.completed");
    out_ += "\"response\":";
    put_response(out_, c_, model_, true, logprobs_);
    event_.end();
  }

 private:
  // {"content_index":0,"delta":TEXT,"item_id":ID,<middle>"output_index":N,...}: a text's delta event.
  void delta_event(const char* type, std::string_view item, size_t index, std::string_view text,
                   std::string_view middle) {
    event_.open(type);
    out_ += "\"content_index\":0,\"delta\":";
    put_string(out_, text);
    out_ += ',';
    put_item_id(out_, item, c_);
    out_ += middle;
    put_output_index(out_, index);
    event_.end();
  }
  // An item's added or done event (`kind`: "rs_", "msg_", "fc_").
  void item_event(const char* type, size_t index, std::string_view kind, bool done, int call) {
    event_.open(type);
    out_ += "\"item\":";
    if (kind == "rs_")
      put_reasoning_item(out_, c_, done);
    else if (kind == "msg_")
      put_message_item(out_, c_, done, logprobs_);
    else
      put_call_item(out_, c_, static_cast<size_t>(call), done);
    out_ += ',';
    put_output_index(out_, index);
    event_.end();
  }
  // {"content_index":0,"item_id":MSG,<middle>"output_index":0,["part":PART,]"sequence_number":N,
  // <after_number>"type":TYPE}: the keys of a content event, sorted (the part: empty when added, whole done).
  void part_event(const char* type, size_t index, std::string_view middle, bool whole_part,
                  std::string_view after_number) {
    event_.open(type);
    out_ += "\"content_index\":0,";
    put_item_id(out_, "msg_", c_);
    out_ += middle;
    put_output_index(out_, index);
    if (std::string_view(type) != "response.output_text.done") {
      out_ += ",\"part\":";
      put_text_part(out_, whole_part ? std::string_view(c_.reply.content) : std::string_view(),
                    whole_part ? logprobs_ : nullptr);
    }
    event_.end(after_number);
  }
  // The events' "logprobs" member: the whole answer's tokens (one delta holds all its text), without bytes
  // as the events' Logprob has none; [] when not asked.
  std::string logprobs_member() const {
    std::string member = "\"logprobs\":";
    if (logprobs_)
      put_token_logprobs(member, *logprobs_, false);
    else
      member += "[]";
    member += ',';
    return member;
  }

  std::string& out_;
  const Completion& c_;
  const std::string& model_;
  const TokenLogprobs* logprobs_;
  EventWriter event_;
};
}  // namespace

void response_delta(std::string& out, const Completion& header, const std::string& model, StreamShown& shown,
                    std::string_view reasoning, std::string_view content) {
  // `header` carries the reasoning shown so far (live_answer.h): whole once the content shows, for the
  // reasoning item's done events.
  ResponseEvents events(out, header, model, nullptr, static_cast<int64_t>(shown.events));
  if (!shown.opened) events.start();
  if (!reasoning.empty()) {
    if (shown.reasoning == 0) events.item_added(0, "rs_");
    events.reasoning_delta(0, reasoning);
  }
  if (!content.empty()) {
    const bool thinking = shown.reasoning > 0 || !reasoning.empty();
    const size_t index = thinking ? 1 : 0;
    if (shown.content == 0) {
      if (thinking) {  // the reasoning is whole once the content shows: its item ends
        events.reasoning_done(0);
        events.item_done(0, "rs_");
      }
      events.item_added(index, "msg_");
      events.part_added(index);
    }
    events.text_delta(index, content);
  }
  shown.events = static_cast<uint64_t>(events.sequence());
}

std::string response_sse(const Completion& c, const std::string& model, const TokenLogprobs* logprobs,
                         const StreamShown& shown) {
  // Room for the whole stream up front: growing it would ask malloc for another large block (and each such
  // request consolidates the small blocks freed since).
  size_t room =
      3072 + 4 * c.reply.content.size() + 4 * c.reply.reasoning.size() + 4 * model.size() + 16 * c.id.size();
  for (const ToolCall& call : c.reply.tool_calls)
    room += 512 + 4 * call.arguments.size() + 3 * call.name.size() + 3 * call.id.size() + 4 * c.id.size();
  std::string out;
  out.reserve(room);
  // What went out while the answer was sampled (`shown`) is not sent again; the numbering goes on.
  ResponseEvents events(out, c, model, logprobs, static_cast<int64_t>(shown.events));
  if (!shown.opened) events.start();
  size_t index = 0;
  if (!c.reply.reasoning.empty()) {
    if (shown.content == 0) {  // (else its item ended when the text began)
      if (shown.reasoning == 0) events.item_added(index, "rs_");
      if (const std::string_view rest = rest_of(c.reply.reasoning, shown.reasoning); !rest.empty())
        events.reasoning_delta(index, rest);
      events.reasoning_done(index);
      events.item_done(index, "rs_");
    }
    ++index;
  }
  if (has_text_part(c)) {
    if (shown.content == 0) {
      events.item_added(index, "msg_");
      events.part_added(index);
    }
    if (const std::string_view rest = rest_of(c.reply.content, shown.content); !rest.empty())
      events.text_delta(index, rest);
    events.text_done(index);
    events.item_done(index, "msg_");
    ++index;
  }
  for (size_t i = 0; i < c.reply.tool_calls.size(); ++i) events.call(index++, i);
  events.finish();
  return out;
}

}  // namespace crl::server::gateway
