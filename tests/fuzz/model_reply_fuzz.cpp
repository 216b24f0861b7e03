// libFuzzer target for what a model samples, as the gateway reads it and every harness copies it back
// (server/gateway/sampled_reply.h, the answer writers of the three APIs and their request decoders).
//
// Input: one selector byte, then the sampled text. Bits 0-2 of the selector pick the tool-call format
// (hermes, llama3_json, deepseek_v3, qwen3_coder, harmony, pythonic; 6 and 7 are hermes), bit 3 the reasoning
// parser (think), bits 4-5 the call's tool_choice (auto, none, required, auto). The text is repaired to
// valid UTF-8 first, as the session does. Properties: nothing crashes; reading is deterministic; every answer
// is valid JSON (every stream event too); and the harness's copy of the answer, made as the harnesses make
// it, decodes without an error into one assistant message whose key is the one the session holds for the
// answer, so that the next call continues the window instead of being taken for a history edit:
//   chat completions: the answer's `message` object as it is, and the message a stream's deltas accumulate
//     to (content joined, tool calls by index with their arguments joined, as the OpenAI SDK does);
//   Anthropic messages: the answer's `content` blocks, and the blocks a stream's events build (text and
//     thinking deltas joined, a tool_use input parsed from its joined input_json_delta parts);
//   Responses: the answer's `output` items, and the items of the stream's response.output_item.done events
//     (which must equal the response.completed event's output), both with the sampled tokens' log-probs on
//     the output_text part (the raw text in pieces of 1-3 bytes, invalid UTF-8 included).
// Each copy is followed by what a harness sends next (tool results for the calls, else a user message).
//
// Built by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined; tests/fuzz/CMakeLists.txt) with
// CRL_LIBFUZZER defined; the gateway tests compile the same function without it and replay the seed corpus
// (tests/fuzz/corpus/model_reply).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/gateway/anthropic_codec.h"
#include "server/gateway/live_reply.h"
#include "server/gateway/openai_answer.h"
#include "server/gateway/openai_codec.h"
#include "server/gateway/responses_codec.h"
#include "server/gateway/sampled_reply.h"
#include "wire/utf8.h"

namespace crl::server::gateway {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& what, const std::string& detail) {
  std::fprintf(stderr, "model_reply: %s\n%s\n", what.c_str(), detail.substr(0, 4000).c_str());
  std::abort();
}

// The tools of every call: qwen3_coder reads parameter values by these types.
const nlohmann::ordered_json& tools() {
  static const nlohmann::ordered_json list = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "shell", "description": "Run a command.",
      "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}, "timeout": {"type": "integer"},
        "ratio": {"type": "number"}, "verbose": {"type": "boolean"}, "args": {"type": "array"},
        "env": {"type": "object"}}, "required": ["cmd"]}}},
    {"type": "function", "function": {"name": "done", "parameters": {"type": "object", "properties": {}}}}])");
  return list;
}

json parse_answer(const std::string& text, const char* api) {
  json parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded()) fail(std::string(api) + " answer is not valid JSON", text);
  return parsed;
}

// The server-sent events of a stream: each event's `data` (without the [DONE] line) and its name.
struct Event {
  std::string name;
  json data;
};
std::vector<Event> events_of(const std::string& stream, const char* api) {
  std::vector<Event> events;
  size_t at = 0;
  while (at < stream.size()) {
    const size_t end = stream.find("\n\n", at);
    if (end == std::string::npos) fail(std::string(api) + " stream has an unterminated event", stream);
    std::string_view block(stream.data() + at, end - at);
    at = end + 2;
    Event event;
    bool has_data = false;
    while (!block.empty()) {
      const size_t nl = block.find('\n');
      const std::string_view line = block.substr(0, nl);
      block = nl == std::string_view::npos ? std::string_view() : block.substr(nl + 1);
      if (line.starts_with("event: ")) {
        event.name = std::string(line.substr(7));
      } else if (line.starts_with("data: ")) {
        if (line == "data: [DONE]") continue;
        event.data = parse_answer(std::string(line.substr(6)), api);
        has_data = true;
      } else {
        fail(std::string(api) + " stream has a line that is not an event field", std::string(line));
      }
    }
    if (has_data) events.push_back(std::move(event));
  }
  return events;
}

// Decodes a harness body with `decode` and checks messages[1], the copy, against the session's keys.
template <class Decode>
void expect_recognised(const json& body, Decode decode, uint64_t key, uint64_t anthropic_key,
                       const char* copy) {
  const std::string text = body.dump();
  CallRequest request;
  try {
    request = decode(text);
  } catch (const GatewayError& e) {
    fail(std::string(copy) + " is refused: " + e.code() + ": " + e.what(), text);
  }
  const std::vector<Message>& messages = request.turn.messages;
  if (messages.size() < 2 || messages[1].role != MessageRole::kAssistant)
    fail(std::string(copy) + " is not one assistant message after the user's", text);
  const uint64_t got = message_key(messages[1]);
  if (got != key && got != anthropic_key) fail(std::string(copy) + " is not recognised as the answer", text);
}

// What a chat harness sends after an answer: a tool message per call, else a user message.
void openai_next(const json& calls, json& messages) {
  if (calls.empty()) {
    messages.push_back({{"role", "user"}, {"content", "next"}});
    return;
  }
  for (const json& call : calls)
    messages.push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "ok"}});
}

void check_chat_stream(const std::string& stream, uint64_t key);

void check_chat(const Completion& completion, uint64_t key, const std::vector<std::string>& streams) {
  const auto decode = [](const std::string& body) { return parse_chat_request(body); };
  const std::string whole = chat_completion_json(completion, "m");
  const json message = parse_answer(whole, "chat")["choices"][0]["message"];
  json messages = json::array({{{"role", "user"}, {"content", "go"}}, message});
  openai_next(message.value("tool_calls", json::array()), messages);
  expect_recognised({{"model", "m"}, {"messages", messages}}, decode, key, key, "a chat answer's copy");

  // The message a stream accumulates to (sent whole, and sent as it was sampled).
  for (const std::string& stream : streams) check_chat_stream(stream, key);
}

void check_chat_stream(const std::string& stream, uint64_t key) {
  const auto decode = [](const std::string& body) { return parse_chat_request(body); };
  std::string content;
  bool has_content = false;
  json calls = json::array();
  for (const Event& event : events_of(stream, "chat")) {
    if (!event.data.contains("choices") || event.data["choices"].empty()) continue;
    const json& delta = event.data["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string()) {
      content += delta["content"].get<std::string>();
      has_content = true;
    }
    for (const json& call : delta.value("tool_calls", json::array())) {
      const size_t index = call["index"].get<size_t>();
      if (index > calls.size()) fail("a streamed tool call skips an index", event.data.dump());
      if (index == calls.size())
        calls.push_back(
            {{"id", call["id"]}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
      json& function = calls[index]["function"];
      if (call.contains("function")) {
        const json& f = call["function"];
        if (f.contains("name"))
          function["name"] = function["name"].get<std::string>() + f["name"].get<std::string>();
        if (f.contains("arguments"))
          function["arguments"] =
              function["arguments"].get<std::string>() + f["arguments"].get<std::string>();
      }
    }
  }
  json streamed = {{"role", "assistant"}, {"content", has_content ? json(content) : json(nullptr)}};
  if (!calls.empty()) streamed["tool_calls"] = calls;
  json messages = json::array({{{"role", "user"}, {"content", "go"}}, streamed});
  openai_next(calls, messages);
  expect_recognised({{"model", "m"}, {"messages", messages}}, decode, key, key, "a chat stream's copy");
}

// What an Anthropic harness sends after an answer: a tool_result block per tool_use, else a text.
json anthropic_body(const json& blocks) {
  json results = json::array();
  for (const json& block : blocks) {
    if (block["type"] == "tool_use")
      results.push_back({{"type", "tool_result"}, {"tool_use_id", block["id"]}, {"content", "ok"}});
  }
  if (results.empty()) results.push_back({{"type", "text"}, {"text", "next"}});
  return {{"model", "m"},
          {"max_tokens", 64},
          {"messages", json::array({{{"role", "user"}, {"content", "go"}},
                                    {{"role", "assistant"}, {"content", blocks}},
                                    {{"role", "user"}, {"content", results}}})}};
}

void check_anthropic(const Completion& completion, uint64_t key, uint64_t anthropic_key,
                     const std::vector<std::string>& streams) {
  const auto decode = [](const std::string& body) { return parse_messages_request(body, false); };
  const json answer = parse_answer(anthropic_message_json(completion, "m"), "anthropic");
  expect_recognised(anthropic_body(answer["content"]), decode, key, anthropic_key,
                    "an Anthropic answer's copy");

  for (const std::string& stream : streams) {
    json blocks = json::array();
    std::string input;  // the open tool_use block's input_json_delta parts
    for (const Event& event : events_of(stream, "anthropic")) {
      const json& data = event.data;
      if (event.name != data.value("type", ""))
        fail("an Anthropic event's name is not its type", data.dump());
      if (data.contains("index") &&
          data["index"].get<size_t>() != blocks.size() - (event.name == "content_block_start" ? 0 : 1))
        fail("an Anthropic event's index is not its block's", stream);
      if (event.name == "content_block_start") {
        blocks.push_back(data["content_block"]);
        input.clear();
      } else if (event.name == "content_block_delta") {
        if (blocks.empty()) fail("a delta before any block", data.dump());
        json& block = blocks.back();
        const json& delta = data["delta"];
        const std::string type = delta["type"];
        if (type == "text_delta") {
          block["text"] = block["text"].get<std::string>() + delta["text"].get<std::string>();
        } else if (type == "thinking_delta") {
          block["thinking"] = block["thinking"].get<std::string>() + delta["thinking"].get<std::string>();
        } else if (type == "signature_delta") {
          block["signature"] = delta["signature"];
        } else if (type == "input_json_delta") {
          input += delta["partial_json"].get<std::string>();
        } else {
          fail("an unknown Anthropic delta", data.dump());
        }
      } else if (event.name == "content_block_stop") {
        if (!blocks.empty() && blocks.back()["type"] == "tool_use") {
          blocks.back()["input"] =
              input.empty() ? json::object() : parse_answer(input, "anthropic tool input");
        }
      }
    }
    expect_recognised(anthropic_body(blocks), decode, key, anthropic_key, "an Anthropic stream's copy");
  }
}

// What a Responses harness sends: the output items back in its input, then a function_call_output per call,
// else a user message.
json responses_body(const json& items) {
  json input = json::array({{{"role", "user"}, {"content", "go"}}});
  bool calls = false;
  for (const json& item : items) input.push_back(item);
  for (const json& item : items) {
    if (item["type"] == "function_call") {
      input.push_back({{"type", "function_call_output"}, {"call_id", item["call_id"]}, {"output", "ok"}});
      calls = true;
    }
  }
  if (!calls) input.push_back({{"role", "user"}, {"content", "next"}});
  return {{"model", "m"}, {"input", input}};
}

// `sampled` (the raw text, before its UTF-8 repair) as the tokens an answer's log-probs show: pieces of one
// to three bytes (so parts of characters and invalid bytes too), each with one alternative.
struct SampledPieces {
  explicit SampledPieces(std::string_view sampled) {
    for (size_t at = 0, n = 0; at < sampled.size(); at += n) {
      n = std::min<size_t>(1 + static_cast<unsigned char>(sampled[at]) % 3, sampled.size() - at);
      shown.tokens.emplace_back(sampled.substr(at, n));
      values.push_back(-static_cast<float>(at) / 8.0f);
      shown.top.push_back({Alternative{std::string(sampled.substr(at, 1)), -1.0f}});
    }
    shown.logprobs = values;
  }
  std::vector<float> values;
  TokenLogprobs shown;
};

void check_responses(const Completion& completion, uint64_t key, std::string_view sampled,
                     const std::vector<std::string>& live_streams) {
  const auto decode = [](const std::string& body) { return parse_responses_request(body); };
  // With the sampled tokens' log-probs on the output_text part (include: message.output_text.logprobs): the
  // harness's copy carries them back, and is still the session's answer.
  const SampledPieces tokens(sampled);
  const json answer = parse_answer(response_json(completion, "m", &tokens.shown), "responses");
  expect_recognised(responses_body(answer["output"]), decode, key, key, "a Responses answer's copy");

  // (A stream sent as it was sampled carries no log-probs: a call that asks for them is sent whole.)
  std::vector<std::string> streams = live_streams;
  streams.push_back(response_sse(completion, "m", &tokens.shown));
  for (const std::string& stream : streams) {
    json items = json::array(), completed;
    int64_t sequence = 0;
    for (const Event& event : events_of(stream, "responses")) {
      if (event.name != event.data.value("type", ""))
        fail("a Responses event's name is not its type", event.data.dump());
      if (event.data["sequence_number"] != sequence++)
        fail("a Responses event's sequence_number is not the next", stream);
      if (event.name == "response.output_item.done") items.push_back(event.data["item"]);
      if (event.name == "response.completed" || event.name == "response.incomplete")
        completed = event.data["response"]["output"];
    }
    if (items != completed) fail("the streamed items are not the completed response's output", items.dump());
    expect_recognised(responses_body(items), decode, key, key, "a Responses stream's copy");
  }
}

// A stream sent as the answer was sampled (server/gateway/live_answer.h): the raw sampled text read by
// LiveReply in pieces of one to three bytes, each piece's shown text sent by `delta`, then the rest by
// `rest`, as the gateway sends them. The shown text must be a prefix of the whole reply's.
template <class Delta, class Rest>
std::string live_stream(const Completion& completion, std::string_view sampled, const LiveRules& rules,
                        const Delta& delta, const Rest& rest) {
  LiveReply reply(rules);
  Completion header;
  header.id = completion.id;
  header.created = completion.created;
  StreamShown shown;
  std::string out;
  for (size_t at = 0, n = 0; at < sampled.size(); at += n) {
    n = std::min<size_t>(1 + static_cast<unsigned char>(sampled[at]) % 3, sampled.size() - at);
    std::string reasoning, content;
    reply.add(sampled.substr(at, n), reasoning, content);
    if (reasoning.empty() && content.empty()) continue;
    header.reply.reasoning = reply.reasoning();
    header.reply.content = reply.content();
    delta(out, header, shown, reasoning, content);
    shown.opened = true;
    shown.reasoning += reasoning.size();
    shown.content += content.size();
  }
  if (!completion.reply.reasoning.starts_with(reply.reasoning()) ||
      !completion.reply.content.starts_with(reply.content()))
    fail("the text shown as it was sampled is not a prefix of the reply", std::string(sampled));
  return out + rest(shown);
}

}  // namespace

int fuzz_model_reply(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static constexpr ToolCallFormat kFormats[8] = {ToolCallFormat::kHermes,     ToolCallFormat::kLlama3Json,
                                                 ToolCallFormat::kDeepSeekV3, ToolCallFormat::kQwen3Coder,
                                                 ToolCallFormat::kHarmony,    ToolCallFormat::kPythonic,
                                                 ToolCallFormat::kHermes,     ToolCallFormat::kHermes};
  static constexpr ToolChoiceMode kChoices[4] = {ToolChoiceMode::kAuto, ToolChoiceMode::kNone,
                                                 ToolChoiceMode::kRequired, ToolChoiceMode::kAuto};
  const ToolCallFormat format = kFormats[data[0] & 7];
  const ReasoningFormat reasoning = (data[0] & 8) ? ReasoningFormat::kThink : ReasoningFormat::kNone;
  ToolChoice choice;
  choice.mode = kChoices[(data[0] >> 4) & 3];

  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (!wire::is_valid_utf8(text)) text = wire::valid_utf8(text);
  std::string again = text;
  Completion completion;
  completion.id = "chatcmpl-fz-1";
  completion.reply = read_sampled_reply(text, format, reasoning, choice, tools(), "fz");
  const AssistantReply twice = read_sampled_reply(again, format, reasoning, choice, tools(), "fz");
  if (twice.content != completion.reply.content || twice.tool_calls != completion.reply.tool_calls ||
      twice.reasoning != completion.reply.reasoning)
    fail("reading the same text twice gave two replies", again);
  completion.finish_reason = completion.reply.tool_calls.empty() ? "stop" : "tool_calls";
  completion.completion_tokens = static_cast<int64_t>(size);

  const uint64_t key = reply_key(completion.reply);
  const uint64_t anthropic_key =
      completion.reply.tool_calls.empty() ? key : anthropic_reply_key(completion.reply);
  const std::string_view sampled(reinterpret_cast<const char*>(data + 1), size - 1);
  LiveRules rules;
  rules.tool_format = format;
  rules.reasoning = reasoning;
  rules.choice = choice;
  const std::string live_chat = live_stream(
      completion, sampled, rules,
      [](std::string& out, const Completion& header, StreamShown& shown, std::string_view r,
         std::string_view c) { chat_completion_delta(out, header, "m", true, !shown.opened, r, c); },
      [&](const StreamShown& shown) { return chat_completion_sse(completion, "m", true, {}, shown); });
  const std::string live_anthropic = live_stream(
      completion, sampled, rules,
      [](std::string& out, const Completion& header, StreamShown& shown, std::string_view r,
         std::string_view c) { anthropic_message_delta(out, header, "m", shown, r, c); },
      [&](const StreamShown& shown) { return anthropic_message_sse(completion, "m", shown); });
  const std::string live_responses = live_stream(
      completion, sampled, rules,
      [](std::string& out, const Completion& header, StreamShown& shown, std::string_view r,
         std::string_view c) { response_delta(out, header, "m", shown, r, c); },
      [&](const StreamShown& shown) { return response_sse(completion, "m", nullptr, shown); });
  check_chat(completion, key, {chat_completion_sse(completion, "m", true), live_chat});
  check_anthropic(completion, key, anthropic_key, {anthropic_message_sse(completion, "m"), live_anthropic});
  check_responses(completion, key, sampled, {live_responses});
  return 0;
}

}  // namespace crl::server::gateway

#ifdef CRL_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return crl::server::gateway::fuzz_model_reply(data, size);
}
#endif
