// The hand-written chat.completion and text_completion answers (server/gateway/openai_codec.cpp) and
// Anthropic message answers (anthropic_codec.cpp) are byte for byte nlohmann's dump of the same objects
// (the writer they replaced, kept here as the reference), over generated completions: quotes, control
// characters, non-ASCII and ill-formed UTF-8 in every string, tool calls with and without content, with
// arguments that hold JSON or not, stop sequences.
#include "server/gateway/openai_codec.h"

#include <gtest/gtest.h>

#include <random>

#include "engine/sse.h"
#include "server/gateway/anthropic_codec.h"

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

std::string reference_chat(const Completion& c, const std::string& model) {
  json message = {{"role", "assistant"}, {"content", c.reply.content}};
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
  return dump({{"id", c.id},
               {"object", "chat.completion"},
               {"created", c.created},
               {"model", model},
               {"choices", json::array({{{"index", 0},
                                         {"message", message},
                                         {"logprobs", nullptr},
                                         {"finish_reason", c.finish_reason}}})},
               {"usage", usage_json(c)}});
}

std::string reference_text(const Completion& c, const std::string& model) {
  return dump({{"id", c.id},
               {"object", "text_completion"},
               {"created", c.created},
               {"model", model},
               {"choices", json::array({{{"index", 0},
                                         {"text", c.reply.content},
                                         {"logprobs", nullptr},
                                         {"finish_reason", c.finish_reason}}})},
               {"usage", usage_json(c)}});
}

json reference_blocks(const Completion& c) {
  json blocks = json::array();
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
std::string reference_chat_sse(const Completion& c, const std::string& model, bool include_usage) {
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

std::string reference_text_sse(const Completion& c, const std::string& model, bool include_usage) {
  std::string out;
  const auto chunk = [&](const std::string& text, const json& finish) {
    json item = {
        {"id", c.id},
        {"object", "text_completion"},
        {"created", c.created},
        {"model", model},
        {"choices",
         json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}}})}};
    if (include_usage) item["usage"] = nullptr;
    append_sse_data(out, dump(item));
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
    const size_t calls = rng() % 3;
    for (size_t k = 0; k < calls; ++k)
      c.reply.tool_calls.push_back(ToolCall{"call_" + std::to_string(k), random_text(rng), random_text(rng)});
    c.finish_reason = calls ? "tool_calls" : (rng() % 2 ? "stop" : "length");
    c.prompt_tokens = static_cast<int64_t>(rng() % 100000);
    c.completion_tokens = static_cast<int64_t>(rng() % 1000);
    c.cached_tokens = static_cast<int64_t>(rng() % 100000) - 1;
    const std::string model = rng() % 4 ? "crl-gateway" : random_text(rng);
    ASSERT_EQ(chat_completion_json(c, model), reference_chat(c, model)) << i;
    ASSERT_EQ(text_completion_json(c, model), reference_text(c, model)) << i;
    for (const bool usage : {false, true}) {
      ASSERT_EQ(chat_completion_sse(c, model, usage), reference_chat_sse(c, model, usage)) << i;
      ASSERT_EQ(text_completion_sse(c, model, usage), reference_text_sse(c, model, usage)) << i;
    }
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
