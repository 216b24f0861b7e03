// The harness's copy of our answer when what the harness was sent is not the text sampled: it must still be
// recognised as our answer, or every such turn would close its window as a history edit (and compaction would
// never see a long window).
//  * Sampled bytes that are not valid UTF-8 (a multi-byte character cut by max_tokens, an untrained model's
//    stray bytes): the harness gets valid UTF-8 (each ill-formed sequence as U+FFFD, as the export's
//    response_text has it) and copies that text back; the recorded ids stay the upstream's own bytes.
//  * A tool call whose arguments are not a JSON object: the Anthropic API's tool_use input is {}.
#include "tests/server/gateway/gateway_fixture.h"

namespace crl::server::gateway::testing {
namespace {

// One U+FFFD per ill-formed sequence (wire/utf8.h): the cut euro sign is one, the 0xFF another.
const std::string kReplaced = "cut \xEF\xBF\xBD and \xEF\xBF\xBD end";

TEST(GatewayUtf8, ChatAnswersAreValidAndTheirCopiesAreRecognised) {
  for (const llm::ApiKind api : {llm::ApiKind::kSglang, llm::ApiKind::kOpenAi}) {
    Bench bench(api);
    Harness h(bench.port(), "utf8-chat", "BROKENUTF8");
    for (int turn = 0; turn < 3; ++turn) {
      const json answer = h.turn();
      ASSERT_FALSE(answer.is_null());
      EXPECT_EQ(answer["choices"][0]["message"]["content"], kReplaced);
      h.add("user", "BROKENUTF8 next");
    }
    EXPECT_EQ(h.state()["history_edits"], 0) << "the harness's copy of a repaired answer is our answer";
    // A retry of the last call (the same messages) is served the stored answer.
    h.messages.erase(h.messages.end() - 1);
    h.messages.erase(h.messages.end() - 1);
    h.turn();
    EXPECT_EQ(h.state()["retries_served"], 1);
    ASSERT_EQ(h.reward(1.0).status, 200);
    const json exported = h.export_json();
    ASSERT_EQ(exported["segments"].size(), 1u);
    const auto calls = bench.upstream->calls();
    ASSERT_EQ(calls.size(), 3u);
    const auto tokenizer = make_tokenizer("byte");
    EXPECT_EQ(tokenizer->decode(calls[0].output), "cut \xE2\x82 and \xFF end<|im_end|>");
    check_exact(exported, calls);  // the ids are the upstream's bytes, not the repaired text's
  }
}

// A turn that must answer one tool call, the harness's copy of it with a tool result, and the next turn,
// which must not be a history edit. Returns the call's arguments as answered ("" when there was no call).
std::string tool_call_round(Harness& h) {
  const json answer = h.turn();
  if (answer.is_null()) return "";
  const json& message = answer["choices"][0]["message"];
  EXPECT_TRUE(message.contains("tool_calls")) << "the call was not parsed: " << message.dump();
  if (!message.contains("tool_calls") || message["tool_calls"].size() != 1) return "";
  const std::string arguments = message["tool_calls"][0]["function"]["arguments"];
  h.messages.push_back(
      {{"role", "tool"}, {"tool_call_id", message["tool_calls"][0]["id"]}, {"content", "a"}});
  h.turn();
  EXPECT_EQ(h.state()["history_edits"], 0);
  return arguments;
}

TEST(GatewayUtf8, ToolCallArgumentsWithBrokenBytesAreParsedAndRecognised) {
  Bench bench;
  Harness h(bench.port(), "utf8-tool", "BROKENTOOL");
  EXPECT_EQ(json::parse(tool_call_round(h), nullptr, false), json({{"cmd", "ls \xEF\xBF\xBD"}}));
}

TEST(GatewayUtf8, PlainCompletionCopiesAreRecognised) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  std::string prompt = "marker=x BROKENUTF8 Task:";
  for (int turn = 0; turn < 3; ++turn) {
    const auto reply = client.call("POST", "/v1/sessions/utf8-plain/v1/completions",
                                   json{{"prompt", prompt}, {"max_tokens", 32}}.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    const std::string text = json::parse(reply.body)["choices"][0]["text"];
    EXPECT_EQ(text, kReplaced);
    prompt += text + "\nObservation: fine\nThought:";
  }
  EXPECT_EQ(json::parse(client.call("GET", "/v1/sessions/utf8-plain").body)["history_edits"], 0);
}

TEST(GatewayUtf8, AnthropicCopiesAreRecognised) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  json messages = json::array({{{"role", "user"}, {"content", "marker=a BROKENUTF8 go"}}});
  for (int turn = 0; turn < 3; ++turn) {
    const json body = {{"model", "claude-test"}, {"max_tokens", 64}, {"messages", messages}};
    const auto reply = client.call("POST", "/v1/sessions/utf8-claude/v1/messages", body.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    const json answer = json::parse(reply.body);
    EXPECT_EQ(answer["content"][0]["text"], kReplaced);
    messages.push_back({{"role", "assistant"}, {"content", answer["content"]}});
    messages.push_back({{"role", "user"}, {"content", "BROKENUTF8 next"}});
  }
  EXPECT_EQ(json::parse(client.call("GET", "/v1/sessions/utf8-claude").body)["history_edits"], 0);
}

// A tool call whose arguments are a bare string: the OpenAI answer carries the string, the Anthropic answer
// an object (its API's `input`); either harness's copy is recognised.
TEST(GatewayCopies, ToolCallsWithArgumentsThatAreNotAnObjectAreRecognisedInBothApis) {
  Bench bench;
  Harness h(bench.port(), "args-openai", "STRINGARGS");
  EXPECT_EQ(tool_call_round(h), "ls -la");

  server::testing::HttpClient client(bench.port());
  json messages = json::array({{{"role", "user"}, {"content", "marker=a STRINGARGS go"}}});
  for (int turn = 0; turn < 2; ++turn) {
    const json body = {{"model", "claude-test"}, {"max_tokens", 128}, {"messages", messages}};
    const auto reply = client.call("POST", "/v1/sessions/args-claude/v1/messages", body.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    const json content = json::parse(reply.body)["content"];
    ASSERT_EQ(content[0]["type"], "tool_use") << content.dump();
    EXPECT_TRUE(content[0]["input"].is_object()) << content.dump();
    messages.push_back({{"role", "assistant"}, {"content", content}});
    messages.push_back(
        {{"role", "user"},
         {"content",
          json::array({{{"type", "tool_result"}, {"tool_use_id", content[0]["id"]}, {"content", "a b"}},
                       {{"type", "text"}, {"text", "STRINGARGS again"}}})}});
  }
  EXPECT_EQ(json::parse(client.call("GET", "/v1/sessions/args-claude").body)["history_edits"], 0);
}

}  // namespace
}  // namespace crl::server::gateway::testing
