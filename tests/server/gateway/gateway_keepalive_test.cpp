// A streamed call's keep-alive while the upstream samples (server/gateway/stream_keepalive.h): past
// --stream-keepalive seconds the head goes out and a comment line every period, then the answer's events; a
// failure after the head is the API's error event; every wait of the call beats (its session's lock, a
// retry's backoff); a call answered sooner, and every call that is not streamed, is sent exactly as before.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/gateway/gateway_fixture.h"
#include "tests/server/gateway/raw_stream_client.h"
#include "tests/server/wait_helpers.h"

namespace crl::server::gateway::testing {
namespace {

json chat_body(const std::string& marker, bool stream) {
  return {{"model", "test"},
          {"stream", stream},
          {"messages", json::array({{{"role", "user"}, {"content", "marker=" + marker + " do the task"}}})}};
}

GatewayOptions keepalive_every(double seconds, double llm_timeout_s = 120) {
  GatewayOptions options;
  options.stream_keepalive_s = seconds;
  options.upstream.request_timeout_s = llm_timeout_s;
  options.upstream.max_retries = 0;
  return options;
}

// The upstream takes 1.5 s; keep-alive every 0.1 s. By 0.8 s (long before the answer) the head and comment
// lines are out and no event; then the answer's events follow, the same content as without the comments,
// and the export records the turn.
TEST(GatewayKeepalive, ALongSampleSendsTheHeadAndCommentsBeforeTheEvents) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 1.5;
  ServerMetrics metrics;
  Bench bench(llm::ApiKind::kSglang, faults, keepalive_every(0.1), {}, {}, &metrics);
  const Observed seen =
      post_raw(bench.port(), "/v1/sessions/ka/v1/chat/completions", chat_body("k1", true), 0.8, 20);
  EXPECT_NE(seen.early.find("HTTP/1.1 200"), std::string::npos) << seen.early;
  EXPECT_NE(seen.early.find(": keep-alive\n\n"), std::string::npos) << seen.early;
  EXPECT_EQ(seen.early.find("data:"), std::string::npos) << "an event before the answer: " << seen.early;
  const Parsed answer = parse(seen.whole);
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.content_type, "text/event-stream");
  EXPECT_GE(count(answer.body, ": keep-alive\n\n"), 5u) << answer.body;
  EXPECT_EQ(answer.body.find("data:"), answer.body.rfind(": keep-alive\n\n") + 14) << "comments then events";
  EXPECT_EQ(join_openai_stream(answer.body).content, "ack k1 0");
  EXPECT_TRUE(answer.body.ends_with("data: [DONE]\n\n")) << answer.body;
  // The same call's retry (the same messages) is the stored answer, sent at once: no comments.
  Harness again(bench.port(), "ka", "k1");
  again.messages = chat_body("k1", true)["messages"];
  const server::testing::Reply retry = again.post(chat_body("k1", true));
  EXPECT_EQ(retry.status, 200);
  EXPECT_EQ(retry.body.find(": keep-alive"), std::string::npos);
  EXPECT_EQ(join_openai_stream(retry.body).content, "ack k1 0");
  again.reward(1.0);
  EXPECT_EQ(again.export_json()["segments"].size(), 1u);
  // A kept-alive stream leaves its connection usable: a client's next call on it is answered.
  Harness reused(bench.port(), "ka2", "k2");  // one keep-alive connection for both calls
  const server::testing::Reply streamed = reused.post(chat_body("k2", true));
  EXPECT_EQ(streamed.status, 200);
  EXPECT_TRUE(streamed.keep_alive);
  EXPECT_NE(streamed.body.find(": keep-alive\n\n"), std::string::npos) << streamed.body;
  EXPECT_EQ(join_openai_stream(streamed.body).content, "ack k2 0");
  const server::testing::Reply next = reused.post(chat_body("k2", true));
  EXPECT_EQ(next.status, 200);
  EXPECT_EQ(join_openai_stream(next.body).content, "ack k2 0");
  // Two calls began early (the retries were answered at once), none failed.
  const std::string exposition = metrics.render();
  EXPECT_NE(exposition.find("crl_gateway_stream_keepalives_total 2\n"), std::string::npos) << exposition;
  EXPECT_NE(exposition.find("crl_gateway_stream_failures_after_head_total 0\n"), std::string::npos);
}

// An HTTP/1.0 client cannot take a chunked body: it gets the whole answer (comments, then events) with a
// Content-Length once the answer is there, as the transport sends any streamed answer to it.
TEST(GatewayKeepalive, AnHttp10ClientGetsTheWholeBodyAtItsEnd) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 0.6;
  Bench bench(llm::ApiKind::kSglang, faults, keepalive_every(0.1));
  const Observed seen = post_raw(bench.port(), "/v1/sessions/h10/v1/chat/completions", chat_body("h", true),
                                 0.3, 20, "HTTP/1.0");
  EXPECT_EQ(seen.early, "") << "bytes before the answer to an HTTP/1.0 client";
  EXPECT_EQ(seen.whole.find("chunked"), std::string::npos) << seen.whole;
  EXPECT_NE(seen.whole.find("Content-Length:"), std::string::npos) << seen.whole;
  const Parsed answer = parse(seen.whole);
  EXPECT_EQ(answer.status, 200);
  EXPECT_NE(answer.body.find(": keep-alive\n\n"), std::string::npos) << answer.body;
  EXPECT_EQ(join_openai_stream(answer.body).content, "ack h 0");
}

// A harness that closes its connection while the comments come loses nothing: the call goes on, its answer
// is recorded, and the harness's retry gets it at once (the stored answer, nothing sampled twice).
TEST(GatewayKeepalive, AClientThatLeavesDuringTheKeepaliveLosesNothing) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 1.0;
  Bench bench(llm::ApiKind::kSglang, faults, keepalive_every(0.05));
  const Observed left =
      post_raw(bench.port(), "/v1/sessions/gone/v1/chat/completions", chat_body("g1", true), 0.3, 0.3);
  EXPECT_NE(left.whole.find(": keep-alive"), std::string::npos) << left.whole;
  EXPECT_TRUE(server::testing::eventually([&] { return bench.upstream->calls().size() == 1; }));
  Harness again(bench.port(), "gone", "g1");
  const server::testing::Reply retry = again.post(chat_body("g1", false));
  EXPECT_EQ(retry.status, 200) << retry.body;
  EXPECT_EQ(json::parse(retry.body)["choices"][0]["message"]["content"], "ack g1 0");
  EXPECT_EQ(bench.upstream->calls().size(), 1u) << "sampled twice";
}

// Beats every millisecond while the answers arrive: every answer whole and right, the upstream called once
// per call. (A beat's wake-up can meet an answer's bytes in the same round of the event loop; a fiber's read
// cut short then would drop what it had taken, so the beating reads wait for readiness and recv. That
// meeting is rare: this test checks high-rate beating end to end, it does not force the race.)
TEST(GatewayKeepalive, BeatsThatMeetTheAnswersBytesLoseNone) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 0.02;
  Bench bench(llm::ApiKind::kSglang, faults, keepalive_every(0.001));
  constexpr int kCalls = 60;
  for (int c = 0; c < kCalls; ++c) {
    const std::string marker = "b" + std::to_string(c);
    const Parsed answer = parse(post_raw(bench.port(), "/v1/sessions/" + marker + "/v1/chat/completions",
                                         chat_body(marker, true), 0, 20)
                                    .whole);
    ASSERT_EQ(answer.status, 200) << c;
    EXPECT_EQ(join_openai_stream(answer.body).content, "ack " + marker + " 0") << c << ": " << answer.body;
  }
  EXPECT_EQ(bench.upstream->calls().size(), static_cast<size_t>(kCalls));
}

// A call answered within the period, and a call that is not streamed however long it waits, are sent as
// before: no comment, one answer.
TEST(GatewayKeepalive, QuickAndUnstreamedCallsAreSentAsBefore) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 0.5;
  {
    Bench bench(llm::ApiKind::kSglang, faults, keepalive_every(5));
    const Parsed quick = parse(
        post_raw(bench.port(), "/v1/sessions/q/v1/chat/completions", chat_body("q1", true), 0, 20).whole);
    EXPECT_EQ(quick.status, 200);
    EXPECT_TRUE(quick.body.starts_with("data: {")) << quick.body;
    EXPECT_EQ(join_openai_stream(quick.body).content, "ack q1 0");
  }
  Bench bench(llm::ApiKind::kSglang, faults, keepalive_every(0.05));
  const Parsed unstreamed = parse(
      post_raw(bench.port(), "/v1/sessions/u/v1/chat/completions", chat_body("u1", false), 0, 20).whole);
  EXPECT_EQ(unstreamed.status, 200);
  EXPECT_EQ(unstreamed.content_type, "application/json");
  EXPECT_EQ(json::parse(unstreamed.body)["choices"][0]["message"]["content"], "ack u1 0");
  // Off (0): a long streamed call waits silently, as before.
  Bench off(llm::ApiKind::kSglang, faults, keepalive_every(0));
  const Observed silent =
      post_raw(off.port(), "/v1/sessions/o/v1/chat/completions", chat_body("o1", true), 0.3, 20);
  EXPECT_EQ(silent.early, "");
  EXPECT_TRUE(parse(silent.whole).body.starts_with("data: {"));
}

// The upstream hangs past the gateway's deadline (1 s) after the head went out: the stream ends with the
// API's error event (status 200 is already sent), in each API's shape; the session stays usable. Before
// the head (keep-alive off), the same failure is the 504 with Retry-After.
TEST(GatewayKeepalive, AFailureAfterTheHeadIsTheApisErrorEvent) {
  crl::testing::FaultOptions faults;
  faults.sticky_every = 1;
  faults.sticky_fault = "hang";
  faults.hang_s = 3;
  ServerMetrics metrics;
  Bench bench(llm::ApiKind::kSglang, faults, keepalive_every(0.1, 1.0), {}, {}, &metrics);
  const auto failed = [&](const std::string& path, const json& body) {
    return parse(post_raw(bench.port(), path, body, 0, 20).whole);
  };
  const Parsed chat = failed("/v1/sessions/f1/v1/chat/completions", chat_body("f1", true));
  EXPECT_EQ(chat.status, 200);
  const size_t error_at = chat.body.find("data: {\"error\":");
  ASSERT_NE(error_at, std::string::npos) << chat.body;
  const json error =
      json::parse(chat.body.substr(error_at + 6, chat.body.find("\n\n", error_at) - error_at - 6));
  EXPECT_EQ(error["error"]["code"], "upstream_timeout") << error;
  EXPECT_EQ(error["error"]["type"], "timeout_error") << error;
  EXPECT_TRUE(chat.body.ends_with("data: [DONE]\n\n")) << chat.body;

  const Parsed anthropic =
      failed("/v1/sessions/f2/v1/messages",
             {{"model", "test"},
              {"max_tokens", 64},
              {"stream", true},
              {"messages", json::array({{{"role", "user"}, {"content", "marker=f2 go"}}})}});
  EXPECT_EQ(anthropic.status, 200);
  const size_t event_at = anthropic.body.find("event: error\ndata: ");
  ASSERT_NE(event_at, std::string::npos) << anthropic.body;
  const json anthropic_error = json::parse(anthropic.body.substr(event_at + 19));
  EXPECT_EQ(anthropic_error["type"], "error");
  EXPECT_EQ(anthropic_error["error"]["code"], "upstream_timeout") << anthropic_error;

  // Responses: an `error` event, then `response.failed` with the failed response (what Codex CLI reads).
  const Parsed responses = failed("/v1/sessions/f3/v1/responses",
                                  {{"model", "codex-test"}, {"stream", true}, {"input", "marker=f3 go"}});
  EXPECT_EQ(responses.status, 200);
  const auto event = [&](const std::string& name) {
    const std::string head = "event: " + name + "\ndata: ";
    const size_t at = responses.body.find(head);
    if (at == std::string::npos) return json();
    const size_t from = at + head.size();
    return json::parse(responses.body.substr(from, responses.body.find("\n\n", from) - from));
  };
  const json responses_error = event("error");
  ASSERT_FALSE(responses_error.is_null()) << responses.body;
  EXPECT_EQ(responses_error["type"], "error");
  EXPECT_EQ(responses_error["code"], "upstream_timeout");
  EXPECT_EQ(responses_error["sequence_number"], 0);
  const json response_failed = event("response.failed");
  ASSERT_FALSE(response_failed.is_null()) << responses.body;
  EXPECT_EQ(response_failed["type"], "response.failed");
  EXPECT_EQ(response_failed["sequence_number"], 1);
  const json& failed_response = response_failed["response"];
  EXPECT_EQ(failed_response["object"], "response");
  EXPECT_EQ(failed_response["status"], "failed");
  EXPECT_EQ(failed_response["model"], "codex-test");
  EXPECT_EQ(failed_response["output"], json::array());
  EXPECT_EQ(failed_response["error"]["code"], "upstream_timeout");
  EXPECT_NE(failed_response["error"]["message"].get<std::string>().find("deadline"), std::string::npos);
  EXPECT_TRUE(failed_response["id"].get<std::string>().starts_with("resp_failed_")) << failed_response;
  EXPECT_TRUE(responses.body.ends_with("\n\n")) << responses.body;
  EXPECT_NE(metrics.render().find("crl_gateway_stream_failures_after_head_total 3\n"), std::string::npos);

  Bench off(llm::ApiKind::kSglang, faults, keepalive_every(0, 1.0));
  const Parsed before =
      parse(post_raw(off.port(), "/v1/sessions/f4/v1/chat/completions", chat_body("f4", true), 0, 20).whole);
  EXPECT_EQ(before.status, 504);
  EXPECT_EQ(before.retry_after, "1");
  EXPECT_EQ(json::parse(before.body)["error"]["code"], "upstream_timeout");
}

// A harness's retry that comes while its first try is still in flight waits for the session's lock (then
// gets the stored answer): streamed, it is kept alive while it waits, as while the upstream samples. The
// first try (not streamed) gets its answer as before, and the upstream is called once.
TEST(GatewayKeepalive, AStreamedRetryWaitingForItsSessionIsKeptAlive) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 1.5;
  Bench bench(llm::ApiKind::kSglang, faults, keepalive_every(0.1));
  const std::string path = "/v1/sessions/busy/v1/chat/completions";
  Observed first;
  std::thread first_try([&] { first = post_raw(bench.port(), path, chat_body("r1", false), 0, 20); });
  // The first try holds the session's lock from its start until its answer, 1.5 s later.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Observed retry = post_raw(bench.port(), path, chat_body("r1", true), 0.6, 20);
  first_try.join();
  EXPECT_NE(retry.early.find("HTTP/1.1 200"), std::string::npos) << "a silent wait: " << retry.early;
  EXPECT_NE(retry.early.find(": keep-alive\n\n"), std::string::npos) << retry.early;
  const Parsed answer = parse(retry.whole);
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(join_openai_stream(answer.body).content, "ack r1 0");
  const Parsed first_answer = parse(first.whole);
  EXPECT_EQ(first_answer.status, 200);
  EXPECT_EQ(first_answer.content_type, "application/json");
  EXPECT_EQ(json::parse(first_answer.body)["choices"][0]["message"]["content"], "ack r1 0");
  EXPECT_EQ(bench.upstream->calls().size(), 1u) << "sampled twice";
}

// The upstream answers the first three tries 503 and the gateway backs off (0.3, 0.6, 1.2 s) between its
// retries: the streamed call is kept alive through the backoff, and then gets the answer of the fourth try.
TEST(GatewayKeepalive, ARetrysBackoffIsKeptAlive) {
  crl::testing::FaultOptions faults;
  faults.transient_5xx = 3;
  GatewayOptions options = keepalive_every(0.1);
  options.upstream.max_retries = 3;
  options.upstream.backoff_s = 0.3;
  Bench bench(llm::ApiKind::kSglang, faults, options);
  const Observed seen =
      post_raw(bench.port(), "/v1/sessions/backoff/v1/chat/completions", chat_body("bo", true), 1.0, 20);
  EXPECT_NE(seen.early.find(": keep-alive\n\n"), std::string::npos) << "a silent backoff: " << seen.early;
  EXPECT_EQ(seen.early.find("data:"), std::string::npos) << seen.early;
  const Parsed answer = parse(seen.whole);
  EXPECT_EQ(answer.status, 200);
  EXPECT_GE(count(answer.body, ": keep-alive\n\n"), 10u) << answer.body;
  EXPECT_EQ(join_openai_stream(answer.body).content, "ack bo 0");
}

// The error shape follows the route, not any path part: a session named "messages" or "responses" still
// gets OpenAI-shaped errors on its chat completions.
TEST(GatewayKeepalive, ErrorShapesFollowTheRouteNotTheSessionsName) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  for (const char* id : {"messages", "responses"}) {
    const auto reply =
        client.call("POST", std::string("/v1/sessions/") + id + "/v1/chat/completions", "{\"messages\": 5}");
    EXPECT_EQ(reply.status, 400) << id;
    const json error = json::parse(reply.body);
    EXPECT_TRUE(error.contains("error") && !error.contains("type")) << id << ": " << reply.body;
  }
  const auto anthropic = client.call("POST", "/v1/sessions/s/v1/messages", "{\"messages\": 5}");
  EXPECT_EQ(json::parse(anthropic.body)["type"], "error") << anthropic.body;
}

}  // namespace
}  // namespace crl::server::gateway::testing
