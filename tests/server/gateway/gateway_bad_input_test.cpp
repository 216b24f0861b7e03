// Hostile and unlucky input to the gateway: malformed bodies and messages, unknown roles, a session used
// after its reward, an upstream that is down or too slow, a harness that rewrites its history, a body over
// the limit. Every answer is an OpenAI-shaped error (or, for an edited history, a recorded new segment),
// the server stays up, and nothing already recorded is lost.
#include <fstream>

#include "tests/server/gateway/gateway_fixture.h"
#include "tests/temp_dir.h"

namespace crl::server::gateway::testing {
namespace {

void expect_openai_error(const server::testing::Reply& reply, int status, const std::string& code,
                         const std::string& param = "") {
  EXPECT_EQ(reply.status, status) << reply.body;
  const json body = json::parse(reply.body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body.contains("error")) << reply.body;
  EXPECT_EQ(body["error"]["code"], code) << reply.body;
  EXPECT_TRUE(body["error"]["message"].is_string());
  EXPECT_TRUE(body["error"]["type"].is_string());
  if (!param.empty()) {
    EXPECT_EQ(body["error"]["param"], param);
  }
}

void expect_alive(uint16_t port) {
  server::testing::HttpClient client(port);
  EXPECT_EQ(client.call("GET", "/health").status, 200);
}

TEST(GatewayBadInput, MalformedBodiesAndMessagesAre400) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const std::string path = "/v1/sessions/bad/v1/chat/completions";
  expect_openai_error(client.call("POST", path, "{not json"), 400, "bad_json");
  expect_openai_error(client.call("POST", path, "[1,2]"), 400, "bad_json");
  expect_openai_error(client.call("POST", path, R"({"messages": 3})"), 400, "bad_messages", "messages");
  expect_openai_error(client.call("POST", path, R"({"messages": []})"), 400, "empty_messages", "messages");
  expect_openai_error(client.call("POST", path, R"({"messages": [{"role": "wizard", "content": "x"}]})"), 400,
                      "bad_role", "messages[0].role");
  expect_openai_error(client.call("POST", path, R"({"messages": [{"role": "user"}]})"), 400, "bad_content",
                      "messages[0].content");
  expect_openai_error(
      client.call("POST", path, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
      400, "bad_content", "messages[0].content[0]");
  expect_openai_error(
      client.call("POST", path, R"({"messages": [{"role": "user", "content": "x"}], "n": 2})"), 400,
      "bad_field", "n");
  expect_openai_error(
      client.call("POST", path, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1})"), 400,
      "bad_field", "max_tokens");
  expect_openai_error(client.call("POST", "/v1/sessions/bad%20id/v1/chat/completions",
                                  R"({"messages": [{"role": "user", "content": "x"}]})"),
                      400, "bad_session_id");
  expect_openai_error(client.call("GET", "/v1/sessions/nobody"), 404, "unknown_session");
  expect_openai_error(client.call("GET", "/v1/sessions/nobody/export"), 404, "unknown_session");
  // Nothing was sent upstream for any of them.
  EXPECT_EQ(bench.upstream->calls().size(), 0u);
  expect_alive(bench.port());
}

// The request bodies are read by the fast reader (engine/json_view.h): hostile JSON is a 400 with the
// byte offset and what was expected, and values of the wrong type where a string or boolean belongs are a
// 400 naming the field (nlohmann's value() threw a type error there: a 500).
TEST(GatewayBadInput, HostileJsonBodiesAre400WithTheOffset) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const std::string path = "/v1/sessions/hostile/v1/chat/completions";
  const std::string anthropic = "/v1/sessions/hostile-a/v1/messages";
  const auto message_of = [](const server::testing::Reply& reply) {
    const json body = json::parse(reply.body, nullptr, false);
    return body.is_object() ? body["error"]["message"].get<std::string>() : std::string();
  };
  const auto bad = client.call("POST", path, R"({"messages": [{"role": "user", "content": "x"}] x})");
  expect_openai_error(bad, 400, "bad_json");
  EXPECT_NE(message_of(bad).find("byte 48"), std::string::npos) << bad.body;
  EXPECT_NE(message_of(bad).find("expected ',' or '}'"), std::string::npos) << bad.body;
  for (const std::string& body : {
           std::string(R"({"messages": [{"role": "user", "content": "\ud800"}]})"),  // lone surrogate
           std::string(R"({"messages": [{"role": "user", "content": "\udc00x"}]})"),
           std::string(R"({"messages": [{"role": "user", "content": "a\qb"}]})"),  // bad escape
           std::string(
               "{\"messages\": [{\"role\": \"user\", \"content\": \"\xC0\xAF\"}]}"),  // overlong UTF-8
           std::string("{\"messages\": [{\"role\": \"user\", \"content\": \"a\0b\"}]}", 50),  // raw NUL
           std::string(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e999})"),
           std::string(R"({"messages": [{"role": "user", "content": "x"}]} {"more": 1})"),  // trailing
           std::string(R"({"messages": [{"role": "user", "content": "x"})"),                // truncated
       }) {
    expect_openai_error(client.call("POST", path, body), 400, "bad_json");
  }
  expect_openai_error(client.call("POST", path, std::string(100000, '[')), 400, "json_too_deep");
  expect_openai_error(
      client.call("POST", path, R"({"messages": [{"role": "user", "content": "x", "content": "y"}]})"), 400,
      "duplicate_key", "messages[0].content");
  expect_openai_error(client.call("POST", path,
                                  R"({"messages": [{"role": "user", "content": "x"}],
                                      "stream_options": {"include_usage": "yes"}})"),
                      400, "bad_field", "stream_options.include_usage");
  expect_openai_error(
      client.call("POST", path, R"({"messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]})"),
      400, "bad_content", "messages[0].content[0]");
  const auto wrong_block = client.call(
      "POST", anthropic,
      R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": ["text"], "text": "x"}]}]})");
  EXPECT_EQ(wrong_block.status, 400) << wrong_block.body;
  EXPECT_EQ(bench.upstream->calls().size(), 0u);
  expect_alive(bench.port());
}

// A live session decodes each body after the messages it repeats of its last one (kept_request.h): broken
// text after them, a key repeated across them, a bad new message are the same 400s as on a first call, and
// the session goes on from its last good body, nothing recorded twice.
TEST(GatewayBadInput, MalformedBodiesOnALiveSessionAre400AndItGoesOn) {
  Bench bench;
  Harness h(bench.port(), "live");
  h.turn();
  h.add("user", "second");
  const std::string good = json{{"max_tokens", 64}, {"messages", h.messages}}.dump();  // max_tokens first
  const std::string open = good.substr(0, good.rfind(']'));                            // the list, not closed
  const auto post = [&](const std::string& body) { return h.client.call("POST", h.path(), body); };
  expect_openai_error(post(open), 400, "bad_json");
  expect_openai_error(post(open + ",]}"), 400, "bad_json");
  expect_openai_error(post(open + "]} trailing"), 400, "bad_json");
  expect_openai_error(post(open + "],\"max_tokens\":8}"), 400, "duplicate_key");
  expect_openai_error(post(open + R"(,{"role":"wizard","content":"x"}]})"), 400, "bad_role",
                      "messages[" + std::to_string(h.messages.size()) + "].role");
  expect_openai_error(post(open + "],\"n\":2}"), 400, "bad_field", "n");
  // None of them reached the upstream; the good body is the session's second turn.
  EXPECT_EQ(bench.upstream->calls().size(), 1u);
  const auto reply = post(good);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(bench.upstream->calls().size(), 2u);
  EXPECT_EQ(h.state()["history_edits"], 0);
  // A malformed first call creates no session.
  expect_openai_error(h.client.call("POST", "/v1/sessions/never/v1/chat/completions", "{\"messages\": ["),
                      400, "bad_json");
  expect_openai_error(h.client.call("GET", "/v1/sessions/never"), 404, "unknown_session");
  expect_alive(bench.port());
}

TEST(GatewayBadInput, ASessionEndsWithItsReward) {
  Bench bench;
  Harness h(bench.port(), "ended");
  h.turn();
  expect_openai_error(h.client.call("GET", "/v1/sessions/ended/export"), 409, "session_running");
  ASSERT_EQ(h.reward(1).status, 200);
  h.add("user", "again");
  expect_openai_error(h.post({{"messages", h.messages}}), 409, "session_ended");
  expect_openai_error(h.reward(1), 409, "session_ended");
  expect_openai_error(h.client.call("POST", "/v1/sessions/ended/reward", R"({"reward": "x"})"), 400,
                      "bad_field");
  // The rollout is intact.
  EXPECT_EQ(h.export_json()["segments"].size(), 1u);
  expect_alive(bench.port());
}

TEST(GatewayBadInput, UpstreamDownIsA503WithRetryAfterAndNothingIsLost) {
  GatewayOptions options;
  options.upstream.max_retries = 0;
  Bench bench(llm::ApiKind::kSglang, {}, options);
  Harness h(bench.port(), "down");
  h.turn();
  h.add("user", "second");
  h.turn();
  const size_t recorded = bench.upstream->calls().size();
  const std::vector<crl::testing::LoggedCall> before = bench.upstream->calls();
  // The upstream goes away; the harness's next call fails cleanly.
  bench.upstream.reset();
  h.add("user", "third");
  const auto failed = h.post({{"messages", h.messages}});
  expect_openai_error(failed, 503, "upstream_unavailable");
  EXPECT_EQ(failed.retry_after, "1");
  EXPECT_EQ(h.state()["upstream_failures"], 1);
  expect_alive(bench.port());
  // The trainer ends the rollout: both answered turns are in the export, the failure in its metadata.
  ASSERT_EQ(h.reward(0, "failed").status, 200);
  const json exported = h.export_json();
  ASSERT_EQ(exported["segments"].size(), 1u);
  const json& segment = exported["segments"][0];
  EXPECT_EQ(segment["status"], "failed");
  EXPECT_EQ(segment["metadata"]["upstream_failures"], "1");
  int64_t sampled = 0;
  for (const json& m : segment["loss_mask"]) sampled += m.get<int>();
  EXPECT_EQ(static_cast<size_t>(sampled), before[0].output.size() + before[1].output.size());
  EXPECT_EQ(recorded, 2u);
}

// An upstream that ran another prompt than the one sent (it names the prompt without its first id, as a
// server that cut the prompt does: SGLang's prompt_tokens, vLLM's prompt_token_ids; the stand-in's
// "truncate" fault, on one sampling seed in five) fails the harness's call with a 502 naming it; the calls
// it answered whole stay recorded, and only they.
TEST(GatewayBadInput, AnUpstreamThatRanAnotherPromptIsA502AndNothingOfItIsRecorded) {
  for (const llm::ApiKind api : {llm::ApiKind::kSglang, llm::ApiKind::kOpenAi}) {
    SCOPED_TRACE(api == llm::ApiKind::kSglang ? "sglang" : "openai");
    crl::testing::FaultOptions faults;
    constexpr uint64_t kEvery = 5;
    faults.sticky_every = kEvery;
    faults.sticky_fault = "truncate";
    GatewayOptions options;
    options.upstream.max_retries = 0;
    Bench bench(api, faults, options);
    Harness h(bench.port(), "cut");
    server::testing::Reply failed;
    for (int i = 0; i < 40 && failed.status == 0; ++i) {
      if (i > 0) h.add("user", "step " + std::to_string(i));
      const auto reply = h.post({{"model", "test"}, {"messages", h.messages}});
      if (reply.status != 200) {
        failed = reply;
        break;
      }
      h.messages.push_back(json::parse(reply.body)["choices"][0]["message"]);
    }
    ASSERT_NE(failed.status, 0) << "no call met the fault";
    expect_openai_error(failed, 502, "upstream_malformed");
    EXPECT_NE(failed.body.find(api == llm::ApiKind::kSglang ? "meta_info.prompt_tokens is"
                                                            : "choices[0].prompt_token_ids has"),
              std::string::npos)
        << failed.body;
    EXPECT_NE(failed.body.find("did not run the prompt it was sent"), std::string::npos) << failed.body;
    EXPECT_EQ(h.state()["upstream_failures"], 1);
    expect_alive(bench.port());
    // The export holds what the calls answered whole sampled, and nothing of the one that failed.
    ASSERT_EQ(h.reward(0, "failed").status, 200);
    const json exported = h.export_json();
    int64_t sampled = 0;
    for (const json& segment : exported["segments"])
      for (const json& m : segment["loss_mask"]) sampled += m.get<int>();
    size_t whole = 0, cut = 0;
    for (const crl::testing::LoggedCall& call : bench.upstream->calls())
      (call.sampling_seed % kEvery == 0 ? cut : whole) += call.output.size();
    EXPECT_GT(cut, 0u);
    EXPECT_GT(whole, 0u);  // (the seeds give a call answered whole first)
    EXPECT_EQ(static_cast<size_t>(sampled), whole);
  }
}

TEST(GatewayBadInput, AFailedCallIsSentAgainOnTheHarnessRetry) {
  crl::testing::FaultOptions faults;
  faults.transient_5xx = 1;  // every distinct request body: one 503 first
  GatewayOptions options;
  options.upstream.max_retries = 0;
  Bench bench(llm::ApiKind::kSglang, faults, options);
  Harness h(bench.port(), "flaky");
  const json body = {{"messages", h.messages}};
  const auto first = h.post(body);
  expect_openai_error(first, 502, "upstream_error");
  EXPECT_EQ(first.retry_after, "1");
  const auto second = h.post(body);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(h.state()["upstream_failures"], 1);
  EXPECT_EQ(h.state()["history_edits"], 0);
}

TEST(GatewayBadInput, ASlowUpstreamMeetsTheDeadline) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 5;
  GatewayOptions options;
  options.upstream.request_timeout_s = 0.2;
  options.upstream.max_retries = 0;
  Bench bench(llm::ApiKind::kSglang, faults, options);
  Harness h(bench.port(), "slow");
  const auto reply = h.post({{"messages", h.messages}});
  expect_openai_error(reply, 504, "upstream_timeout");
  EXPECT_NE(reply.body.find("the deadline of 0.2 s passed"), std::string::npos) << reply.body;
  EXPECT_EQ(reply.retry_after, "1");
  expect_alive(bench.port());
}

TEST(GatewayBadInput, AnEditedHistoryIsRecordedAsANewSegment) {
  Bench bench;
  Harness h(bench.port(), "edited");
  h.turn();
  h.add("user", "second");
  h.turn();
  // The harness rewrites a message after its system prompt and task (e.g. a context trimmer of its own).
  h.messages[3]["content"] = "a different second";
  h.add("user", "third");
  const json answer = h.turn();
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "ack m0 2");
  EXPECT_EQ(h.state()["history_edits"], 1);
  EXPECT_EQ(h.state()["threads"], 1) << "an edit, not another conversation";
  ASSERT_EQ(h.reward(1).status, 200);
  const json exported = h.export_json();
  ASSERT_EQ(exported["segments"].size(), 2u);
  EXPECT_EQ(exported["segments"][1]["metadata"]["history_edits"], "1");
  // The new segment's prompt is the history as given.
  const auto tokenizer = make_tokenizer("byte");
  const std::string prompt = tokenizer->decode(ids_of(exported["segments"][1]["prompt_ids"]));
  EXPECT_NE(prompt.find("a different second"), std::string::npos);
  EXPECT_NE(prompt.find("third"), std::string::npos);
  // Both answered turns of the first window are kept (nothing lost), and every call is in the export.
  int64_t sampled = 0;
  for (const json& m : exported["segments"][0]["loss_mask"]) sampled += m.get<int>();
  const auto calls = bench.upstream->calls();
  EXPECT_EQ(static_cast<size_t>(sampled), calls[0].output.size() + calls[1].output.size());
  EXPECT_EQ(ids_of(exported["segments"][1]["prompt_ids"]), calls[2].prompt);
}

TEST(GatewayBadInput, ABodyOverTheLimitIs413AndTheServerStaysUp) {
  HttpOptions http;
  http.max_body_bytes = 4096;
  Bench bench(llm::ApiKind::kSglang, {}, {}, http);
  Harness h(bench.port(), "big");
  h.add("user", std::string(8000, 'x'));
  const auto reply = h.post({{"messages", h.messages}});
  // OpenAI's error shape, as on every gateway route (an OpenAI client raises APIStatusError with it).
  expect_openai_error(reply, 413, "payload_too_large");
  const json error = json::parse(reply.body)["error"];
  EXPECT_EQ(error["type"], "invalid_request_error") << reply.body;
  EXPECT_TRUE(error.contains("param") && error["param"].is_null()) << reply.body;
  // The Bearer route and plain completions too; the Anthropic route in Anthropic's shape.
  // (A refused request closes its connection: a new client each time.)
  const auto call = [&](const std::string& path, const std::string& body) {
    return server::testing::HttpClient(bench.port()).call("POST", path, body);
  };
  const std::string big = json{{"messages", h.messages}}.dump();
  expect_openai_error(call("/v1/chat/completions", big), 413, "payload_too_large");
  expect_openai_error(call("/v1/sessions/big2/v1/completions?x=1", big), 413, "payload_too_large");
  expect_openai_error(call("/v1/responses", big), 413, "payload_too_large");
  expect_openai_error(call("/v1/sessions/big4/v1/responses", big), 413, "payload_too_large");
  const auto anthropic = call("/v1/sessions/big3/v1/messages", big);
  EXPECT_EQ(anthropic.status, 413);
  const json a = json::parse(anthropic.body, nullptr, false);
  EXPECT_EQ(a.value("type", ""), "error") << anthropic.body;
  EXPECT_EQ(a["error"]["type"], "invalid_request_error") << anthropic.body;
  // Other routes keep crl's own shape.
  const auto episodes = call("/v1/episodes", big);
  EXPECT_EQ(episodes.status, 413);
  EXPECT_FALSE(json::parse(episodes.body, nullptr, false)["error"].contains("type")) << episodes.body;
  expect_alive(bench.port());
  Harness small(bench.port(), "small");
  small.turn();
}

// A first call refused after its body was read (a template that refuses the messages, an empty prompt)
// leaves no session behind: its id is unknown afterwards, and many such calls on new ids never fill the
// session table (here 4 sessions at most) against the calls that work.
TEST(GatewayBadInput, RefusedFirstCallsLeaveNoSession) {
  crl::test::TempDir dir;
  GatewayOptions options = strict_template_options(dir);
  options.max_sessions = 4;
  Bench bench(llm::ApiKind::kSglang, {}, options);
  server::testing::HttpClient client(bench.port());
  const std::string refused =
      R"({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "t"}]})";
  for (int i = 0; i < 12; ++i) {
    const std::string id = "refused-" + std::to_string(i);
    expect_openai_error(client.call("POST", "/v1/sessions/" + id + "/v1/chat/completions", refused), 400,
                        "template_error");
    expect_openai_error(
        client.call("POST", "/v1/sessions/" + id + "-plain/v1/completions", R"({"prompt": ""})"), 400,
        "empty_prompt", "prompt");
    expect_openai_error(client.call("GET", "/v1/sessions/" + id), 404, "unknown_session");
    expect_openai_error(client.call("GET", "/v1/sessions/" + id + "-plain"), 404, "unknown_session");
  }
  EXPECT_EQ(bench.gateway->sessions(), 0u);
  Harness h(bench.port(), "works");
  h.turn();
  EXPECT_EQ(bench.gateway->sessions(), 1u);
  // A refused call on a session that started keeps it (and what it recorded).
  h.messages.push_back({{"role", "tool"}, {"content", "t"}});
  expect_openai_error(h.post({{"messages", h.messages}}), 400, "template_error");
  EXPECT_EQ(client.call("GET", "/v1/sessions/works").status, 200);
  EXPECT_EQ(bench.upstream->calls().size(), 1u);
  expect_alive(bench.port());
}

TEST(GatewayBadInput, AHistoryPastTheCapacityIsContextLengthExceeded) {
  Bench bench;
  Harness h(bench.port(), "huge");
  h.add("user", std::string(2000, 'y'));
  expect_openai_error(h.post({{"messages", h.messages}}), 400, "context_length_exceeded");
  EXPECT_EQ(bench.upstream->calls().size(), 0u);
  expect_alive(bench.port());
}

// The same for the Responses API, whose bodies (Codex's) hold instructions before the input items and the
// tools after them.
TEST(GatewayBadInput, MalformedResponsesBodiesOnALiveSessionAre400AndItGoesOn) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const std::string path = "/v1/sessions/live-r/v1/responses";
  json input = json::array({{{"role", "user"}, {"content", "marker=lr do it"}}});
  const auto body_of = [&](const json& items) {
    nlohmann::ordered_json body = {{"model", "m"}, {"instructions", "Be exact."}};
    body["input"] = items;
    body["tools"] = json::array({{{"type", "function"}, {"name", "shell"}}});
    body["store"] = false;
    return body.dump();
  };
  const auto first = client.call("POST", path, body_of(input));
  ASSERT_EQ(first.status, 200) << first.body;
  const json answer = json::parse(first.body);
  for (const json& item : answer["output"]) input.push_back(item);
  input.push_back({{"role", "user"}, {"content", "second"}});
  const std::string good = body_of(input);
  const std::string open = good.substr(0, good.find("],\"tools\""));  // the input list, not closed
  const auto post = [&](const std::string& body) { return client.call("POST", path, body); };
  expect_openai_error(post(open), 400, "bad_json");
  expect_openai_error(post(open + ",]}"), 400, "bad_json");
  expect_openai_error(post(open + "]} trailing"), 400, "bad_json");
  expect_openai_error(post(open + "],\"instructions\":\"x\"}"), 400, "duplicate_key");
  expect_openai_error(post(open + R"(,{"type":"item_reference","id":"msg_1"}]})"), 400, "bad_input",
                      "input[" + std::to_string(input.size()) + "].type");
  expect_openai_error(post(open + R"(,{"type":"function_call","call_id":"c"}]})"), 400, "bad_input",
                      "input[" + std::to_string(input.size()) + "].name");
  expect_openai_error(post(open + "],\"previous_response_id\":\"resp_1\"}"), 400,
                      "previous_response_not_found", "previous_response_id");
  expect_openai_error(post(open + "],\"conversation\":\"conv_1\"}"), 400, "unsupported_field",
                      "conversation");
  EXPECT_EQ(bench.upstream->calls().size(), 1u);
  const auto reply = post(good);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(bench.upstream->calls().size(), 2u);
  EXPECT_EQ(json::parse(client.call("GET", "/v1/sessions/live-r").body)["history_edits"], 0);
  // A malformed first call creates no session.
  expect_openai_error(client.call("POST", "/v1/sessions/never-r/v1/responses", "{\"input\": ["), 400,
                      "bad_json");
  expect_openai_error(client.call("GET", "/v1/sessions/never-r"), 404, "unknown_session");
  expect_alive(bench.port());
}

TEST(GatewayBadInput, GatewayRoutesAre404WhenOff) {
  server::testing::TestServer server;
  server::testing::HttpClient client(server.port());
  for (const char* path : {"/v1/sessions/x/v1/chat/completions", "/v1/responses"}) {
    const auto reply = client.call("POST", path, "{}");
    EXPECT_EQ(reply.status, 404) << path;
    EXPECT_NE(reply.body.find("gateway_disabled"), std::string::npos) << path;
  }
}

}  // namespace
}  // namespace crl::server::gateway::testing
