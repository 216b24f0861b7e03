// The hand-written chat.completion and text_completion answers (server/gateway/openai_codec.cpp) and
// Anthropic message answers (anthropic_codec.cpp) are byte for byte nlohmann's dump of the same objects
// (the writer they replaced, kept here as the reference), over generated completions: quotes, control
// characters, non-ASCII and ill-formed UTF-8 in every string, tool calls with and without content, with
// arguments that hold JSON or not, stop sequences, the sampled tokens' log-probs.
#include "server/gateway/openai_codec.h"

#include <gtest/gtest.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <random>

#include "engine/sse.h"
#include "server/gateway/answer_writer.h"
#include "server/gateway/anthropic_codec.h"
#include "server/gateway/openai_answer.h"

namespace crl::server::gateway {
namespace {

using nlohmann::json;

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

json usage_json(const Completion& c) {
  return {{"prompt_tokens", c.prompt_tokens},
          {"completion_tokens", c.completion_tokens},
          {"total_tokens", c.prompt_tokens + c.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", c.cached_tokens}}}};
}

// A log-prob in a reference answer: a placeholder string that written() replaces with put_logprob's text
// (nlohmann writes some doubles longer than their shortest digits; put_logprob is tested on its own).
json float_json(float value) {
  return "@@" + std::to_string(std::bit_cast<uint32_t>(value)) + "@@";
}

std::string written(std::string text) {
  for (size_t at = text.find("\"@@"); at != std::string::npos; at = text.find("\"@@", at)) {
    const size_t end = text.find("@@\"", at + 3);
    const auto bits = static_cast<uint32_t>(std::stoul(text.substr(at + 3, end - at - 3)));
    std::string number;
    put_logprob(number, std::bit_cast<float>(bits));
    text.replace(at, end + 3 - at, number);
    at += number.size();
  }
  return text;
}

json reference_chat_logprobs(const TokenLogprobs* logprobs) {
  if (!logprobs) return nullptr;
  json content = json::array();
  for (size_t i = 0; i < logprobs->tokens.size(); ++i) {
    const std::string& token = logprobs->tokens[i];
    json bytes = json::array();
    for (const char ch : token) bytes.push_back(static_cast<unsigned char>(ch));
    json top = json::array();
    if (i < logprobs->top.size()) {
      for (const Alternative& alternative : logprobs->top[i]) {
        json alternative_bytes = json::array();
        for (const char ch : alternative.token) alternative_bytes.push_back(static_cast<unsigned char>(ch));
        top.push_back({{"token", alternative.token},
                       {"logprob", float_json(alternative.logprob)},
                       {"bytes", alternative_bytes}});
      }
    }
    content.push_back({{"token", token},
                       {"logprob", float_json(logprobs->logprobs[i])},
                       {"bytes", bytes},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Python's len() of the token as the answer writes it (ill-formed UTF-8 replaced).
int64_t characters(const std::string& token) {
  const std::string written = json::parse(dump(json(token))).get<std::string>();
  int64_t n = 0;
  for (const char ch : written) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

json reference_text_logprobs(const TokenLogprobs* logprobs) {
  if (!logprobs) return nullptr;
  json tokens = json::array(), values = json::array(), offsets = json::array(), top = json::array();
  int64_t offset = 0;
  for (size_t i = 0; i < logprobs->tokens.size(); ++i) {
    const std::string& token = logprobs->tokens[i];
    tokens.push_back(token);
    values.push_back(float_json(logprobs->logprobs[i]));
    offsets.push_back(offset);
    offset += characters(token);
    json alternatives = {{token, float_json(logprobs->logprobs[i])}};  // the sampled token's entry stays
    if (i < logprobs->top.size()) {
      for (const Alternative& alternative : logprobs->top[i]) {
        if (!alternatives.contains(alternative.token))
          alternatives[alternative.token] = float_json(alternative.logprob);
      }
    }
    top.push_back(alternatives);
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"text_offset", offsets}, {"top_logprobs", top}};
}

json ids_json(const Completion& c) {
  return c.ids;
}
json prompt_ids_json(const Completion& c) {
  return json::parse(c.prompt_ids.empty() ? "[]" : c.prompt_ids);
}

std::string reference_chat(const Completion& c, const std::string& model, const AnswerExtras& extras = {}) {
  json message = {{"role", "assistant"}, {"content", c.reply.content}};
  if (!c.reply.reasoning.empty()) message["reasoning_content"] = c.reply.reasoning;
  if (!c.reply.tool_calls.empty()) {
    json calls = json::array();
    for (const ToolCall& call : c.reply.tool_calls) {
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    message["tool_calls"] = calls;
    if (c.reply.content.empty()) message["content"] = nullptr;
  }
  json choice = {{"index", 0},
                 {"message", message},
                 {"logprobs", reference_chat_logprobs(extras.logprobs)},
                 {"finish_reason", c.finish_reason}};
  json answer = {{"id", c.id},
                 {"object", "chat.completion"},
                 {"created", c.created},
                 {"model", model},
                 {"usage", usage_json(c)}};
  if (extras.token_ids) {
    choice["token_ids"] = ids_json(c);
    answer["prompt_token_ids"] = prompt_ids_json(c);
  }
  answer["choices"] = json::array({choice});
  return written(dump(answer));
}

std::string reference_text(const Completion& c, const std::string& model, const AnswerExtras& extras = {}) {
  json choice = {{"index", 0},
                 {"text", c.reply.content},
                 {"logprobs", reference_text_logprobs(extras.logprobs)},
                 {"finish_reason", c.finish_reason}};
  if (extras.token_ids) {
    choice["token_ids"] = ids_json(c);
    choice["prompt_token_ids"] = prompt_ids_json(c);
  }
  return written(dump({{"id", c.id},
                       {"object", "text_completion"},
                       {"created", c.created},
                       {"model", model},
                       {"choices", json::array({choice})},
                       {"usage", usage_json(c)}}));
}

json reference_blocks(const Completion& c) {
  json blocks = json::array();
  if (!c.reply.reasoning.empty())
    blocks.push_back({{"type", "thinking"}, {"thinking", c.reply.reasoning}, {"signature", ""}});
  if (!c.reply.content.empty() || c.reply.tool_calls.empty())
    blocks.push_back({{"type", "text"}, {"text", c.reply.content}});
  for (const ToolCall& call : c.reply.tool_calls) {
    json input = json::parse(call.arguments, nullptr, false);
    if (!input.is_object()) input = json::object();  // the API allows an object only
    blocks.push_back({{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", input}});
  }
  return blocks;
}

const char* reference_stop_reason(const Completion& c) {
  return !c.stop_sequence.empty()          ? "stop_sequence"
         : c.finish_reason == "length"     ? "max_tokens"
         : c.finish_reason == "tool_calls" ? "tool_use"
                                           : "end_turn";
}

std::string reference_anthropic(const Completion& c, const std::string& model) {
  return dump({{"id", "msg_" + c.id.substr(c.id.find('-') + 1)},
               {"type", "message"},
               {"role", "assistant"},
               {"model", model},
               {"content", reference_blocks(c)},
               {"stop_reason", reference_stop_reason(c)},
               {"stop_sequence", c.stop_sequence.empty() ? json(nullptr) : json(c.stop_sequence)},
               {"usage",
                {{"input_tokens", c.prompt_tokens},
                 {"output_tokens", c.completion_tokens},
                 {"cache_read_input_tokens", c.cached_tokens}}}});
}

// The streams as they were written with nlohmann.
// The log-prob entries ride on the first chunk with sampled text (`carries`).
std::string reference_chat_sse(const Completion& c, const std::string& model, bool include_usage,
                               const AnswerExtras& extras = {}) {
  std::string out;
  bool pending = true;
  const auto chunk = [&](const json& delta, const json& finish, bool carries = true) {
    json choice = {{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}};
    if (carries && pending) {
      choice["logprobs"] = reference_chat_logprobs(extras.logprobs);
      if (extras.token_ids) choice["token_ids"] = ids_json(c);
      pending = false;
    }
    json item = {{"id", c.id},
                 {"object", "chat.completion.chunk"},
                 {"created", c.created},
                 {"model", model},
                 {"choices", json::array({choice})}};
    if (include_usage) item["usage"] = nullptr;
    if (!carries && extras.token_ids) item["prompt_token_ids"] = prompt_ids_json(c);  // the role chunk
    append_sse_data(out, written(dump(item)));
  };
  chunk({{"role", "assistant"}, {"content", ""}}, nullptr, false);
  if (!c.reply.reasoning.empty()) chunk({{"reasoning_content", c.reply.reasoning}}, nullptr);
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

std::string reference_text_sse(const Completion& c, const std::string& model, bool include_usage,
                               const AnswerExtras& extras = {}) {
  std::string out;
  bool first = true;
  const auto chunk = [&](const std::string& text, const json& finish) {
    json choice = {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}};
    if (first) {
      choice["logprobs"] = reference_text_logprobs(extras.logprobs);
      if (extras.token_ids) {
        choice["token_ids"] = ids_json(c);
        choice["prompt_token_ids"] = prompt_ids_json(c);
      }
      first = false;
    }
    json item = {{"id", c.id},
                 {"object", "text_completion"},
                 {"created", c.created},
                 {"model", model},
                 {"choices", json::array({choice})}};
    if (include_usage) item["usage"] = nullptr;
    append_sse_data(out, written(dump(item)));
  };
  if (!c.reply.content.empty()) chunk(c.reply.content, nullptr);
  chunk("", c.finish_reason);
  if (include_usage) {
    const json usage = {{"id", c.id},     {"object", "text_completion"}, {"created", c.created},
                        {"model", model}, {"choices", json::array()},    {"usage", usage_json(c)}};
    append_sse_data(out, dump(usage));
  }
  append_sse_data(out, "[DONE]");
  return out;
}

std::string reference_anthropic_sse(const Completion& c, const std::string& model) {
  std::string out;
  append_sse_event(out, "message_start",
                   dump({{"type", "message_start"},
                         {"message",
                          {{"id", "msg_" + c.id.substr(c.id.find('-') + 1)},
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
  const json blocks = reference_blocks(c);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const json& block = blocks[i];
    json start = block, delta;
    if (block["type"] == "thinking") {
      start["thinking"] = "";
      delta = {{"type", "thinking_delta"}, {"thinking", block["thinking"]}};
    } else if (block["type"] == "text") {
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
    if (block["type"] == "thinking") {  // the signature's delta closes a thinking block
      append_sse_event(out, "content_block_delta",
                       dump({{"type", "content_block_delta"},
                             {"index", i},
                             {"delta", {{"type", "signature_delta"}, {"signature", ""}}}}));
    }
    append_sse_event(out, "content_block_stop", dump({{"type", "content_block_stop"}, {"index", i}}));
  }
  append_sse_event(
      out, "message_delta",
      dump({{"type", "message_delta"},
            {"delta",
             {{"stop_reason", reference_stop_reason(c)},
              {"stop_sequence", c.stop_sequence.empty() ? json(nullptr) : json(c.stop_sequence)}}},
            {"usage", {{"output_tokens", c.completion_tokens}}}}));
  append_sse_event(out, "message_stop", dump({{"type", "message_stop"}}));
  return out;
}

std::string random_text(std::mt19937_64& rng) {
  static const char* kPieces[] = {"a",    "ok ",  "\"",           "\\",       "\n",         "\t",
                                  "\x01", "\x1f", "\x7f",         "é",        "€",          "😀",
                                  "\xC3", "\xFF", "\xED\xA0\x80", "\xF0\x9F", "{\"x\": 1}", "</tool_call>"};
  std::string out;
  const size_t n = rng() % 8;
  for (size_t i = 0; i < n; ++i) out += kPieces[rng() % std::size(kPieces)];
  return out;
}

TEST(GatewayCodec, AnswersAreByteIdenticalToNlohmannsDump) {
  std::mt19937_64 rng(18);
  for (int i = 0; i < 3000; ++i) {
    Completion c;
    c.id = "chatcmpl-s" + random_text(rng) + "-" + std::to_string(i);
    c.created = static_cast<int64_t>(rng() % 4000000000ull);
    c.reply.content = random_text(rng);
    if (rng() % 3 == 0) c.reply.reasoning = random_text(rng);  // a thinking model's reasoning_content
    const size_t calls = rng() % 3;
    for (size_t k = 0; k < calls; ++k)
      c.reply.tool_calls.push_back(ToolCall{"call_" + std::to_string(k), random_text(rng), random_text(rng)});
    c.finish_reason = calls ? "tool_calls" : (rng() % 2 ? "stop" : "length");
    c.prompt_tokens = static_cast<int64_t>(rng() % 100000);
    c.completion_tokens = static_cast<int64_t>(rng() % 1000);
    c.cached_tokens = static_cast<int64_t>(rng() % 100000) - 1;
    const std::string model = rng() % 4 ? "crl-gateway" : random_text(rng);
    // Half of the answers show their tokens' log-probs (token texts with every kind of byte).
    std::vector<float> values;
    std::optional<TokenLogprobs> shown;
    if (rng() % 2) {
      shown.emplace();
      const size_t n = rng() % 6;
      for (size_t k = 0; k < n; ++k) {
        shown->tokens.push_back(random_text(rng));
        values.push_back(-std::exp(std::uniform_real_distribution<float>(-14.0f, 6.0f)(rng)));
      }
      if (rng() % 2) {  // alternatives, some with the sampled token's text or each other's
        shown->top.resize(n);
        for (size_t k = 0; k < n; ++k) {
          for (size_t a = rng() % 4; a > 0; --a) {
            const std::string token = rng() % 4 ? random_text(rng) : shown->tokens[k];
            shown->top[k].push_back(
                Alternative{token, -std::exp(std::uniform_real_distribution<float>(-6.0f, 3.0f)(rng))});
          }
        }
      }
      shown->logprobs = values;
    }
    // Half show the ids (vLLM's return_token_ids): the sampled ones and the prompt's kept text.
    const AnswerExtras extras{shown ? &*shown : nullptr, rng() % 2 == 0};
    for (size_t k = rng() % 5; k > 0; --k) c.ids.push_back(static_cast<TokenId>(rng() % 200000));
    if (extras.token_ids) {
      std::vector<TokenId> prompt(1 + rng() % 6);
      for (TokenId& id : prompt) id = static_cast<TokenId>(rng() % 200000);
      c.prompt_ids = json(prompt).dump();
    }
    ASSERT_EQ(chat_completion_json(c, model, extras), reference_chat(c, model, extras)) << i;
    ASSERT_EQ(text_completion_json(c, model, extras), reference_text(c, model, extras)) << i;
    for (const bool usage : {false, true}) {
      ASSERT_EQ(chat_completion_sse(c, model, usage, extras), reference_chat_sse(c, model, usage, extras))
          << i;
      ASSERT_EQ(text_completion_sse(c, model, usage, extras), reference_text_sse(c, model, usage, extras))
          << i;
    }
  }
}

// A log-prob is written as Python's repr writes the same value (the table: python3's repr of each float,
// every branch of the layout and its thresholds) and reads back as the same float, over random bit patterns
// of every exponent a float has.
TEST(GatewayCodec, ALogprobIsWrittenAsPythonWritesItAndReadsBackExactly) {
  const std::pair<float, const char*> kPython[] = {{0.0f, "0.0"},
                                                   {-0.0f, "-0.0"},
                                                   {-1.0f, "-1.0"},
                                                   {-10.0f, "-10.0"},
                                                   {-0.5f, "-0.5"},
                                                   {-0.1f, "-0.1"},
                                                   {-1e-4f, "-0.0001"},
                                                   {-1.2e-4f, "-0.00012"},
                                                   {-1e-5f, "-1e-05"},
                                                   {-2.5e-5f, "-2.5e-05"},
                                                   {-74.00244f, "-74.00244"},
                                                   {-0.0007580675f, "-0.0007580675"},
                                                   {-123456.0f, "-123456.0"},
                                                   {9.028231e+10f, "90282310000.0"},
                                                   {-1e15f, "-1000000000000000.0"},
                                                   {1.2345678e+15f, "1234567800000000.0"},
                                                   {-1e16f, "-1e+16"},
                                                   {1.2345678e+16f, "1.2345678e+16"},
                                                   {1.1754944e-38f, "1.1754944e-38"},
                                                   {-1e-45f, "-1e-45"},
                                                   {-3.4028235e+38f, "-3.4028235e+38"}};
  for (const auto& [value, python] : kPython) {
    std::string text;
    put_logprob(text, value);
    EXPECT_EQ(text, python);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isfinite(f)) continue;
    std::string text;
    put_logprob(text, f);
    const json read = json::parse(text);
    ASSERT_TRUE(read.is_number_float()) << text;
    ASSERT_EQ(std::bit_cast<uint32_t>(static_cast<float>(read.get<double>())), std::bit_cast<uint32_t>(f))
        << text;
  }
}

TEST(GatewayCodec, AnthropicAnswersAreByteIdenticalToNlohmannsDump) {
  std::mt19937_64 rng(19);
  const char* kArguments[] = {
      "{\"cmd\": \"ls -la\", \"n\": 3, \"deep\": {\"b\": [1, 2.5, null], \"a\": \"\\u00e9\"}}",
      "[1, 2]",
      "\"s\"",
      "not json",
      "",
      "{\"x\": \"\\ud800\"}"};
  size_t with_input = 0;
  for (int i = 0; i < 3000; ++i) {
    Completion c;
    c.id = (rng() % 8 ? "chatcmpl-s" : "nodash") + random_text(rng) + "-" + std::to_string(i);
    c.reply.content = random_text(rng);
    if (rng() % 3 == 0) c.reply.reasoning = random_text(rng);  // a thinking block (thinking enabled)
    const size_t calls = rng() % 3;
    for (size_t k = 0; k < calls; ++k) {
      const std::string arguments = rng() % 2 ? kArguments[rng() % std::size(kArguments)] : random_text(rng);
      with_input += !json::parse(arguments, nullptr, false).is_discarded();
      c.reply.tool_calls.push_back(ToolCall{"toolu_" + random_text(rng), random_text(rng), arguments});
    }
    c.finish_reason = calls ? "tool_calls" : (rng() % 2 ? "stop" : "length");
    if (rng() % 4 == 0) c.stop_sequence = random_text(rng);
    c.prompt_tokens = static_cast<int64_t>(rng() % 100000);
    c.completion_tokens = static_cast<int64_t>(rng() % 1000);
    c.cached_tokens = static_cast<int64_t>(rng() % 100000) - 1;
    const std::string model = rng() % 4 ? "claude" : random_text(rng);
    ASSERT_EQ(anthropic_message_json(c, model), reference_anthropic(c, model)) << i;
    ASSERT_EQ(anthropic_message_sse(c, model), reference_anthropic_sse(c, model)) << i;
  }
  EXPECT_GT(with_input, 500u) << "tool calls whose arguments hold JSON";
}

}  // namespace
}  // namespace crl::server::gateway
