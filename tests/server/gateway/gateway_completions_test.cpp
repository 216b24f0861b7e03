// Plain completions (POST .../v1/completions) on the gateway's session machinery, stop strings on every
// API (chat, plain, Anthropic stop_sequences): passed upstream, the recorded ids the upstream's own; and
// structured output (response_format) passed upstream for the harness's answers, never for summaries.
#include "tests/server/gateway/gateway_fixture.h"
#include "tests/server/wait_helpers.h"

namespace crl::server::gateway::testing {
namespace {

TEST(GatewayCompletions, PlainCompletionsRunOnTheSessionWindowWithCompaction) {
  Bench bench;
  TextHarness h(bench.port(), "plain");
  const json first = h.turn();
  EXPECT_EQ(first["object"], "text_completion");
  EXPECT_EQ(first["choices"][0]["text"], " ack p0 0");
  EXPECT_EQ(first["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(first["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  // The first prompt is the harness's text, no chat turns around it.
  const auto tokenizer = make_tokenizer("byte");
  EXPECT_EQ(bench.upstream->calls()[0].prompt,
            tokenizer->encode_ordinary(h.prompt.substr(0, h.prompt.size() - 9)));
  for (int t = 1; t < 40; ++t) {
    h.prompt += "\nObservation: " + std::to_string(t) + " files counted so far, all fine.\nThought:";
    const json answer = h.turn();
    if (t == 5) {  // a retry: the same text again is answered from the session, nothing sampled twice
      const size_t calls = bench.upstream->calls().size();
      const std::string text = answer["choices"][0]["text"];
      const auto again =
          h.post({{"prompt", h.prompt.substr(0, h.prompt.size() - text.size())}, {"max_tokens", 32}});
      ASSERT_EQ(again.status, 200) << again.body;
      EXPECT_EQ(json::parse(again.body)["choices"][0]["text"], text);
      EXPECT_EQ(bench.upstream->calls().size(), calls);
    }
  }
  EXPECT_EQ(h.state()["history_edits"], 0);
  ASSERT_EQ(h.reward(1.0).status, 200);
  const json exported = h.export_json();
  const auto calls = bench.upstream->calls();
  check_exact(exported, calls);
  check_masks(exported);
  int summaries = 0;
  for (const json& segment : exported["segments"]) summaries += segment["kind"] == "summary";
  EXPECT_GE(summaries, 2) << "the trigger fired on the plain-completion window";
  // Within a window, each call's prompt is the previous one, its answer ids, then the new text.
  for (size_t i = 1; i < calls.size(); ++i) {
    if (calls[i].rid.find("/execute/") == std::string::npos ||
        calls[i - 1].rid.find("/execute/") == std::string::npos)
      continue;
    std::vector<TokenId> expect = calls[i - 1].prompt;
    expect.insert(expect.end(), calls[i - 1].output.begin(), calls[i - 1].output.end());
    ASSERT_LE(expect.size(), calls[i].prompt.size());
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), calls[i].prompt.begin())) << "call " << i;
  }
}

TEST(GatewayCompletions, StreamingBearerEditsAndMixedApis) {
  Bench bench;
  TextHarness h(bench.port(), "plain-stream");
  const auto reply =
      h.post({{"prompt", h.prompt}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_NE(reply.body.find("\"object\":\"text_completion\""), std::string::npos) << reply.body;
  EXPECT_EQ(join_openai_stream(reply.body).content, " ack p0 0") << reply.body;
  EXPECT_NE(reply.body.find("\"completion_tokens\""), std::string::npos) << reply.body;
  EXPECT_EQ(reply.body.substr(reply.body.size() - 14), "data: [DONE]\n\n");
  h.prompt += " ack p0 0\nObservation: 3\nThought:";
  // The session from Authorization: Bearer on /v1/completions.
  const auto bearer = h.client.call("POST", "/v1/completions", json{{"prompt", h.prompt}}.dump(),
                                    "application/json", "", {{"Authorization", "Bearer plain-stream"}});
  ASSERT_EQ(bearer.status, 200) << bearer.body;
  EXPECT_EQ(json::parse(bearer.body)["choices"][0]["text"], " ack p0 1");
  EXPECT_EQ(h.state()["history_edits"], 0);
  // An edited history starts a new window.
  h.prompt = "marker=p0 Task: something else.\nThought:";
  h.turn();
  EXPECT_EQ(h.state()["history_edits"], 1);
  // One session speaks one API.
  const auto chat = h.client.call("POST", "/v1/sessions/plain-stream/v1/chat/completions",
                                  json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump());
  EXPECT_EQ(chat.status, 400) << chat.body;
  EXPECT_EQ(json::parse(chat.body)["error"]["code"], "mixed_apis");
  // Bad input: a prompt that is not one string.
  for (const json& bad :
       {json{{"prompt", json::array({"a", "b"})}}, json{{"prompt", 3}}, json::object(),
        json{{"prompt", "x"}, {"echo", true}}, json{{"prompt", ""}},
        json{{"prompt", "x"}, {"stop", json::array({""})}}, json{{"prompt", "x"}, {"stop", 7}}}) {
    const auto r = h.client.call("POST", "/v1/sessions/plain-bad/v1/completions", bad.dump());
    EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body;
    EXPECT_TRUE(json::parse(r.body)["error"].contains("message"));
  }
  ASSERT_EQ(h.reward(0.0).status, 200);
  check_exact(h.export_json(), bench.upstream->calls());
}

// The answer of an upstream that stopped on a stop string: the recorded ids are exactly the upstream's (the
// string included), the harness's text ends before it.
void expect_stopped_call(const crl::testing::LoggedCall& call, const json& exported) {
  EXPECT_EQ(call.stop, std::vector<std::string>{"\nObservation:"});
  const auto tokenizer = make_tokenizer("byte");
  EXPECT_EQ(tokenizer->decode(call.output), "run ls\nObservation:");
  const json& segment = exported["segments"][0];
  const std::vector<TokenId> response = ids_of(segment["response_ids"]);
  ASSERT_GE(response.size(), call.output.size());
  EXPECT_TRUE(std::equal(call.output.begin(), call.output.end(), response.begin()));
}

// A plain-completion session has one thread: a retry that comes while the first try waits for the upstream
// waits for it, then gets the stored answer (sampled once); the session goes on after both.
TEST(GatewayCompletions, ARetryWhileTheFirstTryIsInFlightGetsItsAnswer) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 0.6;
  Bench bench(llm::ApiKind::kSglang, faults);
  TextHarness first(bench.port(), "plain-retry");
  TextHarness retry(bench.port(), "plain-retry");  // (its own connection)
  json first_answer;
  std::thread first_try([&] { first_answer = first.turn(); });
  EXPECT_TRUE(server::testing::eventually([&] { return bench.upstream->attempts() >= 1; }));
  const json again = retry.turn();
  first_try.join();
  EXPECT_EQ(again["choices"][0]["text"], first_answer["choices"][0]["text"]);
  EXPECT_EQ(bench.upstream->attempts(), 1u) << "sampled twice";
  first.prompt += "\nObservation: 3 files\nThought:";
  first.turn();
  const json state = first.state();
  EXPECT_EQ(state["retries_served"], 1) << state;
  EXPECT_EQ(state["history_edits"], 0) << state;
  EXPECT_EQ(state["threads"], 1) << state;
}

TEST(GatewayStop, ChatStopStringsGoUpstreamAndTheIdsAreTheUpstreams) {
  for (const llm::ApiKind api : {llm::ApiKind::kSglang, llm::ApiKind::kOpenAi}) {
    Bench bench(api);
    Harness h(bench.port(), "stop-chat", "STOPTEST");
    const json answer = h.turn({{"stop", "\nObservation:"}});
    EXPECT_EQ(answer["choices"][0]["message"]["content"], "run ls");
    EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop");
    h.add("user", "Observation: two files");
    h.turn({{"stop", json::array({"\nObservation:"})}});
    EXPECT_EQ(h.state()["history_edits"], 0) << "the harness's copy of a cut answer is recognised";
    ASSERT_EQ(h.reward(1.0).status, 200);
    const json exported = h.export_json();
    const auto calls = bench.upstream->calls();
    ASSERT_EQ(calls.size(), 2u);
    expect_stopped_call(calls[0], exported);
    check_exact(exported, calls);
  }
}

TEST(GatewayStop, PlainCompletionStopStrings) {
  Bench bench;
  TextHarness h(bench.port(), "stop-plain", "STOPTEST");
  const json answer = h.turn({{"stop", json::array({"\nObservation:"})}});
  EXPECT_EQ(answer["choices"][0]["text"], "run ls");
  h.prompt += "\nObservation: two files\nThought:";
  h.turn({{"stop", json::array({"\nObservation:"})}});
  EXPECT_EQ(h.state()["history_edits"], 0);
  ASSERT_EQ(h.reward(1.0).status, 200);
  const json exported = h.export_json();
  expect_stopped_call(bench.upstream->calls()[0], exported);
  check_exact(exported, bench.upstream->calls());
}

TEST(GatewayStop, AnthropicStopSequencesAnswerStopSequence) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const json body = {{"model", "claude-test"},
                     {"max_tokens", 64},
                     {"stop_sequences", json::array({"\nObservation:"})},
                     {"messages", {{{"role", "user"}, {"content", "marker=a STOPTEST go"}}}}};
  const auto reply = client.call("POST", "/v1/sessions/stop-anthropic/v1/messages", body.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json answer = json::parse(reply.body);
  EXPECT_EQ(answer["stop_reason"], "stop_sequence");
  EXPECT_EQ(answer["stop_sequence"], "\nObservation:");
  EXPECT_EQ(answer["content"][0]["text"], "run ls");
  json streamed = body;
  streamed["stream"] = true;
  const auto sse = client.call("POST", "/v1/sessions/stop-anthropic/v1/messages", streamed.dump());
  ASSERT_EQ(sse.status, 200) << sse.body;
  EXPECT_NE(sse.body.find("\"stop_reason\":\"stop_sequence\""), std::string::npos) << sse.body;
  EXPECT_NE(sse.body.find("\"stop_sequence\":\"\\nObservation:\""), std::string::npos) << sse.body;
  const json bad = {
      {"max_tokens", 8}, {"stop_sequences", "x"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}};
  const auto refused = client.call("POST", "/v1/sessions/stop-anthropic2/v1/messages", bad.dump());
  EXPECT_EQ(refused.status, 400) << refused.body;
  ASSERT_EQ(client.call("POST", "/v1/sessions/stop-anthropic/reward", R"({"reward": 1})").status, 200);
  const json exported = json::parse(client.call("GET", "/v1/sessions/stop-anthropic/export").body);
  expect_stopped_call(bench.upstream->calls()[0], exported);
}

// response_format asks the upstream for constrained decoding (SGLang sampling_params.json_schema, the
// OpenAI API's response_format) on the harness's calls; a summary is free text; bad formats are a 400
// naming the field, nothing sampled.
TEST(GatewayStructuredOutput, ResponseFormatGoesUpstreamForTheHarnesssCallsOnly) {
  const json schema = {{"type", "object"},
                       {"properties", {{"cmd", {{"type", "string"}}}}},
                       {"required", json::array({"cmd"})}};
  for (const llm::ApiKind api : {llm::ApiKind::kSglang, llm::ApiKind::kOpenAi}) {
    SCOPED_TRACE(llm::api_kind_name(api));
    Bench bench(api);
    Harness h(bench.port(), "structured");
    const json format = {{"type", "json_schema"}, {"json_schema", {{"name", "step"}, {"schema", schema}}}};
    for (int t = 0; t < 16; ++t) {
      if (t) h.add("user", "turn " + std::to_string(t) + " " + std::string(60, 'z'));
      h.turn({{"response_format", format}});
      const crl::testing::LoggedCall call = bench.upstream->calls().back();
      ASSERT_FALSE(call.json_schema.empty());
      EXPECT_EQ(json::parse(call.json_schema), schema);
    }
    size_t summaries = 0;
    for (const crl::testing::LoggedCall& call : bench.upstream->calls()) {
      if (call.rid.find("/summarize/") == std::string::npos) continue;
      ++summaries;
      EXPECT_TRUE(call.json_schema.empty()) << "a summary is never constrained";
    }
    EXPECT_GE(summaries, 1u);
    h.add("user", "any object");
    h.turn({{"response_format", {{"type", "json_object"}}}});
    EXPECT_EQ(json::parse(bench.upstream->calls().back().json_schema), json({{"type", "object"}}));
    h.add("user", "free text");
    h.turn({{"response_format", {{"type", "text"}}}});
    EXPECT_TRUE(bench.upstream->calls().back().json_schema.empty());

    TextHarness text(bench.port(), "structured-plain");
    text.turn({{"response_format", format}});
    EXPECT_EQ(json::parse(bench.upstream->calls().back().json_schema), schema);
  }
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const json messages = {{{"role", "user"}, {"content", "x"}}};
  const std::pair<json, std::string> bad[] = {
      {"json", "response_format"},
      {{{"type", "xml"}}, "response_format.type"},
      {json::object(), "response_format.type"},
      {{{"type", "json_schema"}}, "response_format.json_schema.schema"},
      {{{"type", "json_schema"}, {"json_schema", {{"schema", json::array({1})}}}},
       "response_format.json_schema.schema"}};
  for (const auto& [format, param] : bad) {
    const auto reply = client.call("POST", "/v1/sessions/structured-bad/v1/chat/completions",
                                   json{{"messages", messages}, {"response_format", format}}.dump());
    EXPECT_EQ(reply.status, 400) << reply.body;
    EXPECT_EQ(json::parse(reply.body)["error"]["param"], param) << reply.body;
  }
  EXPECT_EQ(bench.upstream->calls().size(), 0u);
}

}  // namespace
}  // namespace crl::server::gateway::testing
