// The compaction gateway (server/gateway, PROTOCOL.md section 5) against the stand-in upstream: the mapping
// of a growing message list onto the compacted window, token exactness of every forwarded call against the
// export, retries, streaming, tool calls, long sessions, concurrency, routing.
#include <atomic>
#include <thread>

#include "envs/codec.h"
#include "proto/server.pb.h"
#include "server/gateway/chat_messages.h"
#include "tests/server/gateway/gateway_fixture.h"
#include "wire/wire_codec.h"

namespace crl::server::gateway::testing {
namespace {

TEST(Gateway, OneTurnIsForwardedAndExportedTokenExact) {
  Bench bench;
  Harness h(bench.port(), "one-turn");
  const json answer = h.turn();
  EXPECT_EQ(answer["object"], "chat.completion");
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "ack m0 0");
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop");
  ASSERT_EQ(h.reward(1.0).status, 200);
  const json exported = h.export_json();
  ASSERT_EQ(exported["segments"].size(), 1u);
  const json& segment = exported["segments"][0];
  EXPECT_EQ(segment["kind"], "execution");
  EXPECT_EQ(segment["reward"], 1.0);
  EXPECT_EQ(segment["status"], "completed");
  // The prompt is the ChatML rendering of the two messages plus the assistant header, byte for byte.
  const std::string rendered =
      "<|im_start|>system\nYou are a test agent.<|im_end|>\n<|im_start|>user\nmarker=m0 do the "
      "task<|im_end|>\n<|im_start|>assistant\n";
  const auto tokenizer = make_tokenizer("byte");
  EXPECT_EQ(tokenizer->decode(ids_of(segment["prompt_ids"])), rendered);
  check_exact(exported, bench.upstream->calls());
  check_masks(exported);
}

// The export in either encoding (Accept, as for /v1/episodes/{id}/export): binary protobuf decodes to the
// message the JSON one does; JSON stays the default.
TEST(Gateway, TheExportIsBinaryWhenAcceptAsksForIt) {
  Bench bench;
  Harness h(bench.port(), "binary-export");
  h.turn();
  h.add("user", "output of the step");
  h.turn();
  ASSERT_EQ(h.reward(1.0).status, 200);
  const std::string path = "/v1/sessions/binary-export/export";
  const auto binary = h.client.call("GET", path, "", "application/json", "application/x-protobuf");
  ASSERT_EQ(binary.status, 200) << binary.body;
  EXPECT_EQ(binary.content_type, "application/x-protobuf");
  const auto text = h.client.call("GET", path);
  ASSERT_EQ(text.status, 200);
  EXPECT_EQ(text.content_type, "application/json");
  proto::ExportResponse from_binary, from_json;
  wire::decode_message(binary.body, wire::WireFormat::kProtobuf, from_binary);
  wire::decode_message(text.body, wire::WireFormat::kJson, from_json);
  EXPECT_EQ(wire::encode_message(from_binary, wire::WireFormat::kProtobuf),  // (deterministic: maps sorted)
            wire::encode_message(from_json, wire::WireFormat::kProtobuf));
  EXPECT_EQ(binary.body, wire::encode_message(from_binary, wire::WireFormat::kProtobuf));
  ASSERT_EQ(from_binary.segments_size(), 1);
  EXPECT_EQ(from_binary.segments(0).response_ids_size(), from_json.segments(0).response_ids_size());
  EXPECT_GT(from_binary.segments(0).n_sampled(), 0u);
}

TEST(Gateway, TriggerFiresOnTheRequestToBeSentAndTheWindowIsRebuilt) {
  Bench bench;
  Harness h(bench.port(), "trigger");
  for (int t = 0; t < 40; ++t) {
    h.turn();
    h.add("user", "observation " + std::to_string(t) + ": the build printed 42 lines, all fine.");
  }
  ASSERT_EQ(h.reward(0.5).status, 200);
  const json exported = h.export_json();
  const auto calls = bench.upstream->calls();
  check_exact(exported, calls);
  check_masks(exported);

  const Budget budget = test_budget();
  const ContextTemplate tmpl = make_text_codec(make_tokenizer("byte"))->context_template();
  const int64_t instruction = static_cast<int64_t>(tmpl.summary_instruction.size());
  const int64_t header = static_cast<int64_t>(tmpl.turn_header.size());
  int summaries = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const int64_t size = static_cast<int64_t>(calls[i].prompt.size());
    if (calls[i].rid.find("/summarize/") != std::string::npos) {
      ++summaries;
      // The trigger fired on the request that would have been sent: window + assistant header.
      const int64_t h_size = size - instruction + header;
      EXPECT_LT(budget.capacity - h_size, budget.reserve) << "summary call " << i;
      // The previous call's request did not trigger.
      ASSERT_GT(i, 0u);
      EXPECT_GE(budget.capacity - static_cast<int64_t>(calls[i - 1].prompt.size()), budget.reserve);
      // The next request is the rebuilt window: system + resume(summary) + newest k steps.
      ASSERT_LT(i + 1, calls.size());
      const std::vector<TokenId>& next = calls[i + 1].prompt;
      const std::vector<TokenId>& first = calls[0].prompt;
      const size_t system_size =
          make_tokenizer("byte")->encode("<|im_start|>system\nYou are a test agent.<|im_end|>\n").size();
      EXPECT_TRUE(std::equal(first.begin(), first.begin() + system_size, next.begin()));
      EXPECT_TRUE(
          std::equal(tmpl.resume_prefix.begin(), tmpl.resume_prefix.end(), next.begin() + system_size));
      std::vector<TokenId> body = calls[i].output;
      body.pop_back();  // <|im_end|> is not copied
      EXPECT_TRUE(
          std::equal(body.begin(), body.end(), next.begin() + system_size + tmpl.resume_prefix.size()));
      EXPECT_LT(static_cast<int64_t>(next.size()), budget.capacity - budget.reserve);
    } else {
      EXPECT_GE(budget.capacity - size, budget.reserve) << "execution call " << i << " over the trigger";
      EXPECT_LE(calls[i].max_new_tokens, budget.per_turn_cap);
    }
  }
  EXPECT_GE(summaries, 2);
  // Copied tokens (summary, kept steps) are in the rebuilt windows and never trainable.
  bool copied = false;
  for (const json& segment : exported["segments"]) {
    for (const json& p : segment["prompt_provenance"]) copied = copied || p == "COPIED_SUMMARY";
  }
  EXPECT_TRUE(copied);
  EXPECT_EQ(exported["segments"][0]["metadata"]["history_edits"], "0");
}

TEST(Gateway, ARetryReturnsTheStoredAnswerWithoutSamplingAgain) {
  Bench bench;
  Harness h(bench.port(), "retry");
  h.turn();
  h.add("user", "next");
  const json body = {{"messages", h.messages}};
  const auto first = h.post(body);
  ASSERT_EQ(first.status, 200);
  const size_t calls = bench.upstream->calls().size();
  const auto again = h.post(body);
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(bench.upstream->calls().size(), calls);
  EXPECT_EQ(h.state()["retries_served"], 1);
}

TEST(Gateway, StreamingSendsOpenAiChunksAndDone) {
  Bench bench;
  Harness h(bench.port(), "stream");
  const auto reply =
      h.post({{"messages", h.messages}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.content_type, "text/event-stream");
  ASSERT_GE(reply.body.size(), 14u);
  EXPECT_EQ(reply.body.substr(reply.body.size() - 14), "data: [DONE]\n\n");
  std::string content, finish;
  bool usage = false;
  size_t at = 0;
  while ((at = reply.body.find("data: ", at)) != std::string::npos) {
    const size_t end = reply.body.find("\n\n", at);
    const std::string payload = reply.body.substr(at + 6, end - at - 6);
    at = end;
    if (payload == "[DONE]") break;
    const json chunk = json::parse(payload);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    if (chunk["choices"].empty()) {
      usage = chunk["usage"]["completion_tokens"].get<int>() > 0;
      continue;
    }
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, "ack m0 0");
  EXPECT_EQ(finish, "stop");
  EXPECT_TRUE(usage);
}

// The OpenAI tools of the tool tests: one shell function.
json shell_tools() {
  return json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "shell"}, {"description", "run a command"}, {"parameters", {{"type", "object"}}}}}}});
}

// chat_template_kwargs with a built-in template: it reads no variables, so any object passes (Qwen3's real
// template refuses the ones that change its render:
// GatewayTemplate.TemplateKwargsThatChangeTheRenderAreRefused); anything but an object is a 400 naming the
// field.
TEST(Gateway, TemplateKwargsPassWithABuiltInTemplate) {
  Bench bench;
  Harness h(bench.port(), "kwargs");
  h.turn({{"chat_template_kwargs", {{"enable_thinking", false}}}});
  EXPECT_EQ(h.post({{"messages", h.messages}, {"chat_template_kwargs", "no"}}).status, 400);
  h.add("user", "next");
  h.turn({{"chat_template_kwargs", json::object()}});
  EXPECT_EQ(h.state()["history_edits"], 0);
}

// tool_choice "none": the tools stay in the template, and the answer's text is answered as text (no
// tool_calls, finish_reason stop), as vLLM answers it; the harness's copy of that text continues the window.
TEST(Gateway, ToolChoiceNoneAnswersTheTextWithoutToolCalls) {
  Bench bench;
  Harness h(bench.port(), "no-tools");
  const json tools = shell_tools();
  h.add("user", "please call the tool");
  const json answer = h.turn({{"tools", tools}, {"tool_choice", "none"}});
  const json& message = answer["choices"][0]["message"];
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(message.contains("tool_calls"));
  EXPECT_NE(message["content"].get<std::string>().find("<tool_call>"), std::string::npos) << message;
  EXPECT_NE(make_tokenizer("byte")->decode(bench.upstream->calls()[0].prompt).find("<tools>"),
            std::string::npos);
  h.add("user", "next");
  EXPECT_EQ(h.turn({{"tools", tools}, {"tool_choice", "none"}})["choices"][0]["message"]["content"],
            "ack m0 1");
  EXPECT_EQ(h.state()["history_edits"], 0) << "the copy of a text answer is recognised";
  // The same question with tool_choice auto: a tool call.
  h.add("user", "please call the tool");
  EXPECT_EQ(h.turn({{"tools", tools}, {"tool_choice", "auto"}})["choices"][0]["finish_reason"], "tool_calls");
}

TEST(Gateway, ToolCallsGoThroughTheTemplateAndComeBackParsed) {
  Bench bench;
  Harness h(bench.port(), "tools");
  const json tools = shell_tools();
  h.add("user", "please call the tool");
  const json answer = h.turn({{"tools", tools}});
  const json& message = answer["choices"][0]["message"];
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "tool_calls");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "shell");
  EXPECT_EQ(json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"cmd", "ls -la"}}));
  EXPECT_TRUE(message["content"].is_null());
  const auto tokenizer = make_tokenizer("byte");
  const std::string first_prompt = tokenizer->decode(bench.upstream->calls()[0].prompt);
  EXPECT_NE(first_prompt.find("<tools>\n{\"function\""), std::string::npos) << first_prompt;
  // The harness answers the call; the session continues in the same window (no history edit).
  h.messages.push_back(
      {{"role", "tool"}, {"tool_call_id", message["tool_calls"][0]["id"]}, {"content", "a b c"}});
  h.turn({{"tools", tools}});
  EXPECT_EQ(h.state()["history_edits"], 0);
  const std::string second = tokenizer->decode(bench.upstream->calls()[1].prompt);
  EXPECT_NE(second.find("<tool_response>\na b c\n</tool_response>"), std::string::npos) << second;
  // Other tools (one changed description), then none: each a history edit, the tools seen as sent.
  json changed = tools;
  changed[0]["function"]["description"] = "run a command now";
  h.add("user", "again");
  h.turn({{"tools", changed}});
  EXPECT_EQ(h.state()["history_edits"], 1);
  EXPECT_NE(tokenizer->decode(bench.upstream->calls()[2].prompt).find("run a command now"),
            std::string::npos);
  h.add("user", "and without tools");
  h.turn();
  EXPECT_EQ(h.state()["history_edits"], 2);
  EXPECT_EQ(tokenizer->decode(bench.upstream->calls()[3].prompt).find("<tools>"), std::string::npos);
  ASSERT_EQ(h.reward(1).status, 200);
  check_exact(h.export_json(), bench.upstream->calls());
}

TEST(Gateway, TwoHundredTurnsWithSeveralCompactionsOverOpenAiCompletions) {
  Bench bench(llm::ApiKind::kOpenAi);
  Harness h(bench.port(), "long");
  for (int t = 0; t < 200; ++t) {
    h.turn();
    h.add("user", "step " + std::to_string(t) + " output: ok");
  }
  const json state = h.state();
  EXPECT_GE(state["compactions"].get<int>(), 10);
  EXPECT_EQ(state["history_edits"], 0);
  ASSERT_EQ(h.reward(1).status, 200);
  const json exported = h.export_json();
  EXPECT_EQ(check_exact(exported, bench.upstream->calls()), bench.upstream->calls().size());
  check_masks(exported);
  for (const auto& call : bench.upstream->calls()) EXPECT_EQ(call.api, "openai");
}

TEST(Gateway, SixtyFourConcurrentSessionsDoNotCrossTalk) {
  Bench bench;
  constexpr int kSessions = 64, kTurns = 12;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int s = 0; s < kSessions; ++s) {
    threads.emplace_back([&, s] {
      Harness h(bench.port(), "conc-" + std::to_string(s), "s" + std::to_string(s));
      for (int t = 0; t < kTurns; ++t) {
        const json answer = h.turn();
        const std::string content = answer["choices"][0]["message"]["content"].get<std::string>();
        if (content.rfind("ack s" + std::to_string(s) + " ", 0) != 0) ++bad;
        h.add("user",
              "session " + std::to_string(s) + " turn " + std::to_string(t) + " padding padding padding");
      }
      if (h.reward(s).status != 200) ++bad;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  const auto calls = bench.upstream->calls();
  for (int s = 0; s < kSessions; ++s) {
    const std::string id = "conc-" + std::to_string(s);
    std::vector<crl::testing::LoggedCall> mine;
    for (const auto& call : calls) {
      if (call.rid.rfind(id + "/", 0) == 0) mine.push_back(call);
    }
    Harness reader(bench.port(), id);
    const json exported = reader.export_json();
    EXPECT_EQ(exported["segments"][0]["reward"], static_cast<double>(s));
    check_exact(exported, mine);
    for (const auto& call : mine) EXPECT_EQ(call.routing_key, id);
  }
}

// A trainer's concurrent sessions are concurrent requests at the upstream (its batch): the stand-in holds
// every answer until 96 calls are inside it at once. With the server's default options all 96 get there (on
// fibers: gateway_inline_test.cpp); when calls held threads, a fixed pool of 32 workers let 33 through (one
// on an I/O thread), and the stand-in's hold ran out a minute later.
TEST(Gateway, ConcurrentSessionsReachTheUpstreamTogether) {
  constexpr int kSessions = 96;
  crl::testing::FaultOptions faults;
  faults.hold_until_in_flight = kSessions;
  faults.hold_s = 20;  // bounds a failure's wait only
  Bench bench(llm::ApiKind::kSglang, faults);
  EXPECT_EQ(first_calls_at_once(bench, kSessions, "w"), kSessions);
  EXPECT_EQ(bench.upstream->peak_in_flight(), static_cast<uint64_t>(kSessions))
      << "the gateway's calls reached the upstream at most " << bench.upstream->peak_in_flight()
      << " at once";
}

TEST(Gateway, RoutingKeyRidAndCachedTokensAreForwardedAndRecorded) {
  Bench bench;
  Harness h(bench.port(), "route");
  h.turn();
  h.add("user", "more");
  h.turn();
  const auto calls = bench.upstream->calls();
  ASSERT_EQ(calls.size(), 2u);
  for (const auto& call : calls) {
    EXPECT_EQ(call.routing_key, "route");
    EXPECT_EQ(call.rid.rfind("route/execute/", 0), 0u) << call.rid;
  }
  ASSERT_EQ(h.reward(1).status, 200);
  const json metadata = h.export_json()["segments"][0]["metadata"];
  // The stand-in reports half the prompt as cached.
  EXPECT_EQ(metadata["upstream_cached_tokens"],
            std::to_string(calls[0].prompt.size() / 2) + "," + std::to_string(calls[1].prompt.size() / 2));
  EXPECT_EQ(metadata["upstream_calls"], "2");
}

TEST(Gateway, BearerTokenNamesTheSession) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const json body = {{"messages", {{{"role", "user"}, {"content", "marker=b1 hi"}}}}};
  const auto reply = client.call("POST", "/v1/chat/completions", body.dump(), "application/json", "",
                                 {{"Authorization", "Bearer bearer-session"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(json::parse(reply.body)["choices"][0]["message"]["content"], "ack b1 0");
  EXPECT_EQ(client.call("GET", "/v1/sessions/bearer-session").status, 200);
  const auto missing = client.call("POST", "/v1/chat/completions", body.dump());
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(json::parse(missing.body)["error"]["code"], "missing_session");
}

// GET /v1/models, as vLLM and SGLang answer it (harnesses list models at start; trainers poll it until the
// server is up): the one model, with the session's default capacity as its context; also under a
// session's base URL, without making the session; another model's id is a 404, another method a 405.
TEST(Gateway, ModelsListTheOneModelServed) {
  GatewayOptions options;
  options.model = "policy";
  Bench bench(llm::ApiKind::kSglang, {}, options);
  server::testing::HttpClient client(bench.port());
  for (const char* path : {"/v1/models", "/v1/sessions/harness-7/v1/models"}) {
    const auto reply = client.call("GET", path);
    ASSERT_EQ(reply.status, 200) << path << ": " << reply.body;
    const json list = json::parse(reply.body);
    EXPECT_EQ(list["object"], "list");
    ASSERT_EQ(list["data"].size(), 1u) << list;
    EXPECT_EQ(list["data"][0]["id"], "policy");
    EXPECT_EQ(list["data"][0]["object"], "model");
    EXPECT_EQ(list["data"][0]["max_model_len"], test_budget().capacity);
    EXPECT_GT(list["data"][0]["created"].get<int64_t>(), 1700000000);
  }
  EXPECT_EQ(client.call("GET", "/v1/sessions/harness-7").status, 404) << "listing models makes no session";
  const auto one = client.call("GET", "/v1/sessions/harness-7/v1/models/policy");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body)["id"], "policy");
  const auto other = client.call("GET", "/v1/models/gpt-4");
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(json::parse(other.body)["error"]["code"], "model_not_found") << other.body;
  EXPECT_EQ(client.call("POST", "/v1/models", "{}").status, 405);
  EXPECT_EQ(client.call("GET", "/v1/models/policy/x").status, 404);
}

TEST(Gateway, ExplicitCreateSetsTheBudgetAndDeleteRemoves) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const json create = {{"session_id", "made"},
                       {"budget", {{"capacity", 2000}, {"reserve", 500}}},
                       {"group_index", 3},
                       {"sample_index", 4},
                       {"metadata", {{"task", "t-1"}}}};
  const auto created = client.call("POST", "/v1/sessions", create.dump());
  ASSERT_EQ(created.status, 200) << created.body;
  EXPECT_EQ(json::parse(created.body)["budget"]["capacity"], 2000);
  EXPECT_EQ(client.call("POST", "/v1/sessions", create.dump()).status, 409);
  Harness h(bench.port(), "made");
  h.turn();
  ASSERT_EQ(h.reward(1).status, 200);
  const json segment = h.export_json()["segments"][0];
  EXPECT_EQ(segment["group_index"], "3");
  EXPECT_EQ(segment["metadata"]["task"], "t-1");
  EXPECT_EQ(client.call("DELETE", "/v1/sessions/made").status, 200);
  EXPECT_EQ(client.call("GET", "/v1/sessions/made").status, 404);
  const json bad = {{"budget", {{"capacity", 100}, {"reserve", 500}}}};
  const auto refused = client.call("POST", "/v1/sessions", bad.dump());
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(json::parse(refused.body)["error"]["code"], "bad_budget");
}

// crl serve asks the upstream for its model's context at start (policies/llm/served_models.h) and refuses a
// --capacity above it; a session's own budget may not go above it either.
TEST(Gateway, ASessionsCapacityMustFitTheUpstreamsContext) {
  GatewayOptions options;
  options.budget = test_budget();
  options.upstream_context = options.budget.capacity + 100;
  Bench bench(llm::ApiKind::kSglang, {}, options);
  server::testing::HttpClient client(bench.port());
  const auto fits = client.call(
      "POST", "/v1/sessions",
      json{{"budget", {{"capacity", options.upstream_context}, {"reserve", options.budget.reserve}}}}.dump());
  EXPECT_EQ(fits.status, 200) << fits.body;
  const auto refused = client.call(
      "POST", "/v1/sessions",
      json{{"budget", {{"capacity", options.upstream_context + 1}, {"reserve", options.budget.reserve}}}}
          .dump());
  ASSERT_EQ(refused.status, 400) << refused.body;
  const json error = json::parse(refused.body)["error"];
  EXPECT_EQ(error["code"], "bad_budget");
  EXPECT_EQ(error["param"], "budget.capacity");
  EXPECT_NE(error["message"].get<std::string>().find("is more than the LLM server's context (max_model_len " +
                                                     std::to_string(options.upstream_context)),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace crl::server::gateway::testing
