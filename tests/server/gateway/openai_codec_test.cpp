// The hand-written chat.completion and text_completion answers (server/gateway/openai_codec.cpp) are byte
// for byte nlohmann's dump of the same objects (the writer they replaced, kept here as the reference), over
// generated completions: quotes, control characters, non-ASCII and ill-formed UTF-8 in every string, tool
// calls with and without content.
#include "server/gateway/openai_codec.h"

#include <gtest/gtest.h>

#include <random>

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
  }
}

}  // namespace
}  // namespace crl::server::gateway
