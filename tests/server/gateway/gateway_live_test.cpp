// A streamed call's answer sent as the upstream samples it (server/gateway/live_answer.h): with an SGLang
// upstream that streams, the harness reads the first words before the last are sampled, joins exactly the
// message a whole answer gives (and its copy continues the window), sees its tool calls at the end, gets
// the API's error event when the upstream fails mid-answer (nothing recorded), and never sees a summary
// request's text.
#include <string>
#include <tuple>

#include "server/metrics.h"
#include "tests/server/gateway/gateway_fixture.h"
#include "tests/server/gateway/raw_stream_client.h"

namespace crl::server::gateway::testing {
namespace {

json chat(const json& messages, bool stream) {
  return {{"model", "test"}, {"stream", stream}, {"messages", messages}};
}

json first_messages(const std::string& marker) {
  return json::array({{{"role", "user"}, {"content", "marker=" + marker + " do the task"}}});
}

// Each upstream event 40 ms after the one before: an answer of about a dozen tokens takes half a second.
void slow_stream(crl::testing::ScriptedLlmOptions& llm) {
  llm.stream_event_delay_s = 0.04;
}

class GatewayLive : public BothPaths {};

TEST_P(GatewayLive, TheFirstWordsArriveWhileTheRestIsSampled) {
  ServerMetrics metrics;
  Bench bench(llm::ApiKind::kSglang, {}, GatewayOptions{}, http(), ServiceOptions{}, &metrics, slow_stream);
  const Observed seen = post_raw(bench.port(), "/v1/sessions/live/v1/chat/completions",
                                 chat(first_messages("w1"), true), 0.2, 20);
  const Parsed whole = parse(seen.whole);
  ASSERT_TRUE(whole.whole);
  const JoinedStream joined = join_openai_stream(whole.body);
  EXPECT_EQ(joined.content, "ack w1 0");
  EXPECT_EQ(joined.finish, "stop");
  EXPECT_TRUE(joined.done);
  if (GetParam()) {
    // On the I/O threads' fibers (crl serve's way): by 0.2 s, the head and the first chunks (the role,
    // then some of the text), not the end; the text in several chunks.
    const Parsed early = parse(seen.early);
    EXPECT_EQ(early.status, 200);
    EXPECT_EQ(early.content_type, "text/event-stream");
    EXPECT_FALSE(join_openai_stream(early.body).content.empty()) << seen.early;
    EXPECT_EQ(early.body.find("[DONE]"), std::string::npos) << seen.early;
    EXPECT_GT(joined.content_chunks, 3u);
    EXPECT_NE(metrics.render().find("crl_gateway_streams_live_total 1\n"), std::string::npos);
  } else {
    // A transport that cannot send before its handler returns (the worker pool) gets the answer whole.
    EXPECT_EQ(joined.content_chunks, 1u);
    EXPECT_NE(metrics.render().find("crl_gateway_streams_live_total 0\n"), std::string::npos);
  }
  // The harness's copy of the joined message continues the window.
  Harness h(bench.port(), "live");
  h.messages = first_messages("w1");
  h.messages.push_back({{"role", "assistant"}, {"content", joined.content}});
  h.messages.push_back({{"role", "user"}, {"content", "next"}});
  const auto second = h.post(chat(h.messages, true));
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(join_openai_stream(second.body).content, "ack w1 1");
  EXPECT_EQ(h.state()["history_edits"], 0);
  EXPECT_EQ(h.state()["retries_served"], 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, GatewayLive, ::testing::Bool(), path_name);

// The Anthropic and Responses streams too: their text deltas go out as the answer is sampled, and the
// whole stream is the one a whole answer gives (Anthropic's block indexes, Responses' sequence numbers
// without a gap).
TEST(GatewayLiveStreams, AnthropicAndResponsesStreamsSendTheirTextAsItIsSampled) {
  Bench bench(llm::ApiKind::kSglang, {}, GatewayOptions{}, HttpOptions{}, ServiceOptions{}, nullptr,
              slow_stream);
  const json anthropic = {{"model", "claude"},
                          {"max_tokens", 64},
                          {"stream", true},
                          {"messages", json::array({{{"role", "user"}, {"content", "marker=a7 go"}}})}};
  const json responses = {{"model", "codex"},
                          {"stream", true},
                          {"input", json::array({{{"role", "user"}, {"content", "marker=r7 go"}}})}};
  for (const auto& [path, body, delta, text] :
       {std::tuple{"/v1/sessions/anthropic-live/v1/messages", anthropic, "\"type\":\"text_delta\"",
                   "ack a7 0"},
        std::tuple{"/v1/sessions/responses-live/v1/responses", responses,
                   "\"type\":\"response.output_text.delta\"", "ack r7 0"}}) {
    const Observed seen = post_raw(bench.port(), path, body, 0.2, 20);
    EXPECT_NE(parse(seen.early).body.find(delta), std::string::npos) << path << ": " << seen.early;
    const Parsed whole = parse(seen.whole);
    ASSERT_TRUE(whole.whole) << path;
    std::string joined;
    int64_t sequence = 0;
    for (size_t at = whole.body.find("data: "); at != std::string::npos;
         at = whole.body.find("data: ", at + 1)) {
      const json event = json::parse(whole.body.substr(at + 6, whole.body.find("\n\n", at) - at - 6));
      if (event.contains("sequence_number")) {
        EXPECT_EQ(event["sequence_number"], sequence++) << path;
      }
      if (event["type"] == "content_block_delta" && event["delta"]["type"] == "text_delta") {
        EXPECT_EQ(event["index"], 0);
        joined += event["delta"]["text"].get<std::string>();
      }
      if (event["type"] == "response.output_text.delta") joined += event["delta"].get<std::string>();
    }
    EXPECT_EQ(joined, text) << path;
    EXPECT_GT(count(whole.body, delta), 3u) << path;
  }
}

// --stream-upstream off: a streamed call is sent whole once the upstream answered, as before.
TEST(GatewayLiveStreams, OffSendsTheAnswerWhole) {
  GatewayOptions options;
  options.stream_upstream = false;
  Bench bench(llm::ApiKind::kSglang, {}, options, HttpOptions{}, ServiceOptions{}, nullptr, slow_stream);
  const Observed seen = post_raw(bench.port(), "/v1/sessions/off/v1/chat/completions",
                                 chat(first_messages("o1"), true), 0.2, 20);
  EXPECT_EQ(seen.early, "") << "nothing before the answer is whole";
  const JoinedStream joined = join_openai_stream(parse(seen.whole).body);
  EXPECT_EQ(joined.content, "ack o1 0");
  EXPECT_EQ(joined.content_chunks, 1u);
}

// SGLang's two kinds of stream (the answer so far in each event, or only its new tokens) and the OpenAI
// API's give the same stream to the harness and the same recorded ids as a call answered whole.
TEST(GatewayLiveStreams, BothKindsOfUpstreamStreamRecordWhatAWholeAnswerRecords) {
  std::vector<json> exports;
  // Not streamed; SGLang's default stream; its incremental stream; the OpenAI API's stream (vLLM's chunks).
  for (const int kind : {0, 1, 2, 3}) {
    Bench bench(kind == 3 ? llm::ApiKind::kOpenAi : llm::ApiKind::kSglang, {}, GatewayOptions{},
                HttpOptions{}, ServiceOptions{}, nullptr,
                [&](crl::testing::ScriptedLlmOptions& llm) { llm.incremental_stream = kind == 2; });
    Harness h(bench.port(), "kinds");
    for (int turn = 0; turn < 3; ++turn) {
      const auto reply = h.post(chat(h.messages, kind > 0));
      ASSERT_EQ(reply.status, 200) << reply.body;
      const std::string content =
          kind > 0 ? join_openai_stream(reply.body).content
                   : json::parse(reply.body)["choices"][0]["message"]["content"].get<std::string>();
      h.messages.push_back({{"role", "assistant"}, {"content", content}});
      h.messages.push_back({{"role", "user"}, {"content", "observation " + std::to_string(turn)}});
    }
    ASSERT_EQ(h.reward(1).status, 200);
    const json exported = h.export_json();
    exports.push_back(exported);
  }
  ASSERT_FALSE(exports[0].is_null());
  EXPECT_EQ(exports[1]["segments"], exports[0]["segments"]);
  EXPECT_EQ(exports[2]["segments"], exports[0]["segments"]);
  // (The stand-in reports a prefix cache hit through SGLang's meta_info only: the OpenAI API's usage has no
  // cached_tokens there.)
  json openai = exports[3]["segments"], sglang = exports[0]["segments"];
  for (json* segments : {&openai, &sglang}) {
    for (json& segment : *segments) {
      segment["metadata"].erase("upstream_cached_tokens");
      segment["metadata"].erase("upstream_cached_tokens_total");
    }
  }
  EXPECT_EQ(openai, sglang);
}

// A tool call: the content before it streams, the call comes whole at the end (finish tool_calls), and the
// harness's copy continues the window.
TEST(GatewayLiveStreams, AToolCallComesWholeAfterTheContent) {
  Bench bench;
  Harness h(bench.port(), "tools");
  h.messages = json::array({{{"role", "user"}, {"content", "marker=t1 TEXTANDTOOL please"}}});
  json body = chat(h.messages, true);
  body["tools"] = json::array(
      {{{"type", "function"}, {"function", {{"name", "shell"}, {"parameters", {{"type", "object"}}}}}}});
  const auto reply = h.post(body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const JoinedStream joined = join_openai_stream(reply.body);
  EXPECT_EQ(joined.content, "Let me look.") << reply.body;
  EXPECT_LT(joined.first_content + 1, joined.chunks) << "the content came before the call's chunk";
  EXPECT_EQ(joined.finish, "tool_calls") << reply.body;
  ASSERT_EQ(joined.tool_calls.size(), 1u) << reply.body;
  EXPECT_EQ(joined.tool_calls[0]["function"]["name"], "shell");
  json copy = {{"role", "assistant"}, {"tool_calls", json::array({joined.tool_calls[0]})}};
  copy["content"] = joined.content.empty() ? json(nullptr) : json(joined.content);
  copy["tool_calls"][0].erase("index");
  h.messages.push_back(copy);
  h.messages.push_back(
      {{"role", "tool"}, {"tool_call_id", joined.tool_calls[0]["id"]}, {"content", "file_a file_b"}});
  body = chat(h.messages, true);
  body["tools"] = json::array(
      {{{"type", "function"}, {"function", {{"name", "shell"}, {"parameters", {{"type", "object"}}}}}}});
  ASSERT_EQ(h.post(body).status, 200);
  EXPECT_EQ(h.state()["history_edits"], 0);
}

// The upstream fails after the first tokens went out: the stream ends with the OpenAI error event (status
// 200 was sent), nothing is recorded, and the session goes on.
TEST(GatewayLiveStreams, AFailureMidAnswerEndsWithTheErrorEvent) {
  for (const std::string fault : {"stream_cut", "stream_error"}) {
    crl::testing::FaultOptions faults;
    faults.sticky_every = 1;
    faults.sticky_fault = fault;
    // (Events 40 ms apart: the first words go out before the failure is read. Read together, the call
    // fails as a whole answer that failed does: a 502, nothing sent before it.)
    Bench bench(llm::ApiKind::kSglang, faults, GatewayOptions{}, HttpOptions{}, ServiceOptions{}, nullptr,
                slow_stream);
    Harness h(bench.port(), "failing");
    const auto reply = h.post(chat(h.messages, true));
    EXPECT_EQ(reply.status, 200) << fault;
    const JoinedStream joined = join_openai_stream(reply.body.substr(0, reply.body.find("data: {\"error\"")));
    EXPECT_FALSE(joined.content.empty()) << fault << ": the first words went out\n" << reply.body;
    EXPECT_NE(reply.body.find("data: {\"error\":"), std::string::npos) << reply.body;
    EXPECT_TRUE(reply.body.ends_with("data: [DONE]\n\n")) << reply.body;
    EXPECT_EQ(bench.upstream->attempts(), 1u) << fault << ": tokens went out, so no retry samples again";
    const json state = h.state();
    EXPECT_EQ(state["upstream_failures"], 1) << state.dump();
    EXPECT_EQ(state["turns"], 0) << state.dump();
  }
}

// Calls that compact first: the summary request's text never reaches the harness's stream.
TEST(GatewayLiveStreams, ASummaryIsNeverShown) {
  Bench bench;
  Harness h(bench.port(), "compacting");
  int compactions = 0;
  for (int turn = 0; turn < 24 && compactions < 2; ++turn) {
    const auto reply = h.post(chat(h.messages, true));
    ASSERT_EQ(reply.status, 200) << reply.body;
    const std::string content = join_openai_stream(reply.body).content;
    EXPECT_EQ(reply.body.find("SUMMARY"), std::string::npos) << reply.body;
    EXPECT_TRUE(content.starts_with("ack ")) << content;
    h.messages.push_back({{"role", "assistant"}, {"content", content}});
    h.messages.push_back({{"role", "user"}, {"content", std::string(120, 'o')}});
    compactions = h.state()["compactions"];
  }
  EXPECT_GE(compactions, 2);
}

}  // namespace
}  // namespace crl::server::gateway::testing
