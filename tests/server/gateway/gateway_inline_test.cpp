// Gateway calls run on fibers on the I/O thread that read them (HttpOptions::gateway_inline,
// server/http_server.h, server/fiber.h): no worker-pool hop and no thread held while the upstream answers,
// so one I/O thread carries every call in flight; the server's guarantees hold on both paths (the upstream
// deadline's OpenAI-shaped 504, the drain deadline, per-session order, no cross-talk between concurrent
// sessions).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "tests/server/gateway/gateway_fixture.h"
#include "tests/server/wait_helpers.h"

namespace crl::server::gateway::testing {
namespace {

using server::testing::eventually;

// Which requests are the gateway's (asked of every request before it is routed, to answer it inline): the
// router's own test, on the path's non-empty parts.
TEST(GatewayInline, GatewayPathsAreTheRoutersGatewayRoutes) {
  for (const char* path :
       {"/v1/sessions/s1/v1/chat/completions", "/v1/sessions", "/v1/sessions/", "/v1/chat/completions",
        "//v1//chat//completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/completions",
        "/v1/sessions/s1/v1/messages", "v1/completions", "/v1/models", "/v1/models/m", "/v1/responses",
        "/v1/responses/input_tokens"}) {
    EXPECT_TRUE(is_gateway_path(path)) << path;
  }
  for (const char* path : {"", "/", "/v1", "/v1/", "/health", "/v1/episodes", "/v1/chat",
                           "/v1/chat/completions/x", "/v1/completions/x", "/v2/sessions", "/x/v1/sessions",
                           "/v1/session", "/V1/sessions", "/v1/episodes/e1/step", "/v1/models/m/x"}) {
    EXPECT_FALSE(is_gateway_path(path)) << path;
  }
}

// The only worker is held by a blocking request; a gateway call is still answered, so it did not go through
// the pool (with the pool hop it would wait until the blocker gives up, 30 s later).
TEST(GatewayInline, AGatewayCallIsAnsweredWhileTheOnlyWorkerIsBusy) {
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> blocker_timed_out{false};
  HttpOptions http;
  http.threads = 2;
  http.workers = 1;
  http.routes = [&](const HttpCall& call) -> std::optional<HttpAnswer> {
    if (call.target != "/block") return std::nullopt;
    std::unique_lock lock(mutex);
    if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return release; })) blocker_timed_out = true;
    return HttpAnswer{200, "application/json", "{}"};
  };
  Bench bench(llm::ApiKind::kSglang, {}, {}, http);
  std::thread blocker([&] {
    server::testing::HttpClient client(bench.port());
    EXPECT_EQ(client.call("GET", "/block").status, 200);
  });
  ASSERT_TRUE(eventually([&] { return bench.server->server.stats().handling == 1; }));
  Harness h(bench.port(), "inline");
  for (int turn = 0; turn < 3; ++turn) {
    const json answer = h.turn();
    EXPECT_EQ(answer["choices"][0]["message"]["content"], "ack m0 " + std::to_string(turn));
    h.add("user", "next");
  }
  EXPECT_FALSE(blocker_timed_out.load()) << "the gateway calls waited for the busy worker";
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  cv.notify_all();
  blocker.join();
}

// One I/O thread and one worker: sixteen harnesses' calls all wait at the upstream at once (the stand-in
// holds every answer until sixteen are inside it; each call on its fiber, none holding a thread), and /health
// is answered meanwhile. Run on threads, they would have gone through the one worker one at a time, and the
// hold would have run out with one call inside.
TEST(GatewayInline, OneIoThreadCarriesEveryCallWaitingOnTheUpstream) {
  constexpr int kHarnesses = 16;
  crl::testing::FaultOptions faults;
  faults.hold_until_in_flight = kHarnesses;
  faults.hold_s = 20;  // bounds a failure's wait only
  HttpOptions http;
  http.threads = 1;
  http.workers = 1;
  http.max_workers = 1;
  Bench bench(llm::ApiKind::kSglang, faults, {}, http);
  const int answered = first_calls_at_once(bench, kHarnesses, "m", [&] {
    ASSERT_TRUE(eventually([&] { return bench.upstream->peak_in_flight() >= 2; }));
    server::testing::HttpClient probe(bench.port());
    EXPECT_EQ(probe.call("GET", "/health").status, 200);
  });
  EXPECT_EQ(answered, kHarnesses);
  EXPECT_EQ(bench.upstream->peak_in_flight(), static_cast<uint64_t>(kHarnesses));
  EXPECT_LE(bench.server->server.stats().worker_threads, 1u);
}

// One I/O thread, one session, eight conversations calling at once (a harness's parallel sub-agents under
// one Bearer token): their calls wait at the upstream together, each on its fiber holding its own thread of
// the session (not the session's lock), and each conversation gets its own answers. Waiting for each other,
// the first calls would have run out the stand-in's hold one by one (5 s each) with one call inside.
TEST(GatewayInline, OneSessionsParallelConversationsWaitAtTheUpstreamTogether) {
  constexpr int kAgents = 8;
  crl::testing::FaultOptions faults;
  faults.hold_until_in_flight = kAgents;
  faults.hold_s = 5;
  HttpOptions http;
  http.threads = 1;
  http.workers = 1;
  http.max_workers = 1;
  Bench bench(llm::ApiKind::kSglang, faults, {}, http);
  std::atomic<int> answered{0};
  std::vector<std::thread> agents;
  for (int a = 0; a < kAgents; ++a) {
    agents.emplace_back([&, a] {
      const std::string marker = "a" + std::to_string(a);
      Harness h(bench.port(), "subagents", marker);
      h.messages[0]["content"] = "You are sub-agent " + std::to_string(a) + ".";
      for (int t = 0; t < 3; ++t) {
        if (t) h.add("user", "next");
        const json answer = h.turn();
        if (h.last.status != 200 || bench.upstream->peak_in_flight() < static_cast<uint64_t>(kAgents)) return;
        if (answer["choices"][0]["message"]["content"] == "ack " + marker + " " + std::to_string(t))
          ++answered;
      }
    });
  }
  for (std::thread& agent : agents) agent.join();
  EXPECT_EQ(bench.upstream->peak_in_flight(), static_cast<uint64_t>(kAgents));
  EXPECT_EQ(answered, 3 * kAgents);
  const json state = Harness(bench.port(), "subagents").state();
  EXPECT_EQ(state["threads"], kAgents) << state;
  EXPECT_EQ(state["history_edits"], 0) << state;
  EXPECT_EQ(state["upstream_calls"], 3 * kAgents) << state;
}

// Two identical calls on one session at once, on one I/O thread: the second waits for the first (for its
// thread of the session, which the first holds while the upstream samples) by suspending its fiber
// (server/fiber_mutex.h), then gets the stored answer (a harness retry) instead of a second sample. With a
// std::mutex the second call would block the only I/O thread under the first, which then could never
// resume: both would hang.
TEST(GatewayInline, ASessionsSecondCallWaitsForTheFirstWithoutBlockingTheThread) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 0.3;
  HttpOptions http;
  http.threads = 1;
  Bench bench(llm::ApiKind::kSglang, faults, {}, http);
  Harness first(bench.port(), "twice");
  const json body = {{"model", "test"}, {"messages", first.messages}};
  server::testing::Reply replies[2];
  std::thread other([&] {
    Harness second(bench.port(), "twice");
    replies[1] = second.post(body);
  });
  replies[0] = first.post(body);
  other.join();
  ASSERT_EQ(replies[0].status, 200) << replies[0].body;
  ASSERT_EQ(replies[1].status, 200) << replies[1].body;
  EXPECT_EQ(json::parse(replies[0].body)["choices"][0]["message"],
            json::parse(replies[1].body)["choices"][0]["message"]);
  EXPECT_EQ(bench.upstream->attempts(), 1u);
}

class GatewayPaths : public BothPaths {};

// A slow upstream meets --llm-timeout on either path, with OpenAI's error shape.
TEST_P(GatewayPaths, ASlowUpstreamStillHitsTheDeadline) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 5;
  GatewayOptions options;
  options.upstream.request_timeout_s = 0.2;
  options.upstream.max_retries = 0;
  Bench bench(llm::ApiKind::kSglang, faults, options, http());
  Harness h(bench.port(), "slow");
  const auto reply = h.post({{"model", "test"}, {"messages", h.messages}});
  EXPECT_EQ(reply.status, 504) << reply.body;
  const json error = json::parse(reply.body)["error"];
  EXPECT_EQ(error["code"], "upstream_timeout");
  EXPECT_TRUE(error["message"].is_string());
  EXPECT_EQ(reply.retry_after, "1");
}

// The drain deadline passes while a call waits on an upstream that stays silent for a minute (well inside
// --llm-timeout): the harness gets 503 drain_deadline, the upstream call is cancelled (recorded as the
// session's upstream failure) instead of holding the thread, and run() returns with nothing unfinished.
TEST_P(GatewayPaths, TheDrainDeadlineCancelsACallBlockedOnTheUpstream) {
  crl::testing::FaultOptions faults;
  faults.sticky_every = 1;
  faults.sticky_fault = "hang";
  faults.hang_s = 60;
  GatewayOptions options;
  options.upstream.request_timeout_s = 120;
  options.upstream.max_retries = 0;
  HttpOptions o = http();
  o.drain_timeout_s = 0.2;
  Bench bench(llm::ApiKind::kSglang, faults, options, o);
  std::thread harness([&] {
    Harness h(bench.port(), "hung");
    const auto reply = h.post({{"model", "test"}, {"messages", h.messages}});
    EXPECT_EQ(reply.status, 503) << reply.body;
    EXPECT_NE(reply.body.find("drain_deadline"), std::string::npos) << reply.body;
  });
  ASSERT_TRUE(eventually([&] { return bench.server->server.stats().handling == 1; }));
  ASSERT_TRUE(eventually([&] { return bench.upstream->attempts() >= 1; }));
  bench.server->server.request_stop();
  harness.join();
  bench.server->thread.join();  // run() returned: no I/O thread is still blocked in the call
  if (GetParam()) {
    EXPECT_EQ(bench.server->server.unfinished(), 0u);  // run() ran the call's fiber to its end
  } else {
    // On the pool the handler may return just after run() (which stops once its connections are closed);
    // without the cancel it would stay blocked for the upstream's whole minute.
    EXPECT_TRUE(eventually([&] { return bench.server->server.unfinished() == 0; }));
  }
  bench.server->thread = std::thread([] {});  // for TestServer's destructor
  const std::vector<std::string_view> parts = {"v1", "sessions", "hung"};
  HttpCall call{"GET", "/v1/sessions/hung", "", "", ""};
  const HttpAnswer state = bench.gateway->route(call, parts);
  ASSERT_EQ(state.status, 200) << state.body;
  EXPECT_EQ(json::parse(state.body)["upstream_failures"], 1) << state.body;
}

// One session's turns alternate between two connections (on different event loops) while other sessions
// load the server, on fibers or on the pool: every answer counts exactly the turns before it (the session's
// calls stay in order) and the export matches the upstream's log call for call.
TEST_P(GatewayPaths, ASessionsCallsStayOrderedAcrossPathsAndConnections) {
  Bench bench(llm::ApiKind::kSglang, {}, {}, http());
  constexpr int kSessions = 8, kTurns = 6;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int s = 0; s < kSessions; ++s) {
    threads.emplace_back([&, s] {
      const std::string marker = "s" + std::to_string(s);
      Harness h(bench.port(), "order-" + std::to_string(s), marker);
      server::testing::HttpClient other(bench.port());
      for (int t = 0; t < kTurns; ++t) {
        const std::string body = json{{"model", "test"}, {"messages", h.messages}}.dump();
        const auto reply =
            t % 2 == 0 ? h.client.call("POST", h.path(), body) : other.call("POST", h.path(), body);
        if (reply.status != 200) {
          ++bad;
          return;
        }
        const json message = json::parse(reply.body)["choices"][0]["message"];
        if (message["content"] != "ack " + marker + " " + std::to_string(t)) ++bad;
        h.messages.push_back(message);
        h.add("user", "turn " + std::to_string(t));
      }
      if (h.reward(s).status != 200) ++bad;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  const auto calls = bench.upstream->calls();
  for (int s = 0; s < kSessions; ++s) {
    const std::string id = "order-" + std::to_string(s);
    std::vector<crl::testing::LoggedCall> mine;
    for (const auto& call : calls) {
      if (call.rid.rfind(id + "/", 0) == 0) mine.push_back(call);
    }
    EXPECT_EQ(mine.size(), static_cast<size_t>(kTurns));
    Harness reader(bench.port(), id);
    check_exact(reader.export_json(), mine);
  }
}

// Pipelined requests (HTTP/1.1 section 9.3.2): a client writes many calls before reading; they are answered
// one after the other, in the order sent, on either path, whatever the body's framing (a length, or two
// chunks) and wherever the connection's 32 KB reads cut it (200 calls are about 50 KB). (Whether answers
// nest handlers is not seen from outside: an answer sent in place continues the connection only when
// nothing else is buffered, server/http_connection.cpp.)
TEST_P(GatewayPaths, PipelinedCallsAreAnsweredInOrder) {
  Bench bench(llm::ApiKind::kSglang, {}, {}, http());
  constexpr int kCalls = 200;
  std::string bytes;
  for (int i = 0; i < kCalls; ++i) {
    const std::string body =
        json{{"model", "test"},
             {"messages",
              json::array({{{"role", "user"}, {"content", "marker=p" + std::to_string(i) + " go"}}})}}
            .dump();
    const std::string target = "/v1/sessions/pipe-" + std::to_string(i) + "/v1/chat/completions";
    bytes += "POST " + target + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
    if (i % 2 == 0) {
      bytes += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    } else {  // chunked, split mid-body
      const std::string a = body.substr(0, body.size() / 2), b = body.substr(body.size() / 2);
      const auto hex = [](size_t n) {
        std::ostringstream out;
        out << std::hex << n;
        return out.str();
      };
      bytes += "Transfer-Encoding: chunked\r\n\r\n" + hex(a.size()) + "\r\n" + a + "\r\n" + hex(b.size()) +
               "\r\n" + b + "\r\n0\r\n\r\n";
    }
  }
  const std::string last = "ack p" + std::to_string(kCalls - 1) + " 0";
  const std::string answers = server::testing::raw_exchange(bench.port(), bytes, false, 60.0, last);
  size_t at = 0;
  for (int i = 0; i < kCalls; ++i) {
    const size_t found = answers.find("ack p" + std::to_string(i) + " 0\"", at);
    ASSERT_NE(found, std::string::npos) << "call " << i << " unanswered or out of order";
    at = found;
  }
  size_t statuses = 0;
  for (size_t s = answers.find("HTTP/1.1 200"); s != std::string::npos;
       s = answers.find("HTTP/1.1 200", s + 1))
    ++statuses;
  EXPECT_EQ(statuses, static_cast<size_t>(kCalls));
}

INSTANTIATE_TEST_SUITE_P(InlineAndPool, GatewayPaths, ::testing::Bool(), path_name);

}  // namespace
}  // namespace crl::server::gateway::testing
