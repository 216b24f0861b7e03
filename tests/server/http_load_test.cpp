// Blocking work and limits (issue 14 item 3): environment steps run on the worker pool, so /health answers
// while steps block; connections beyond --max-connections get 503 with Retry-After; the drain deadline is
// hard. Blocking comes from a test environment whose step waits on a gate the test opens; every wait is on
// an event, with generous bounds only as a guard against a hang.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "envs/registry.h"
#include "server/http_server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"
#include "tests/server/wait_helpers.h"
#include "wire/wire_codec.h"

namespace crl::server {
namespace {

using testing::HttpClient;
using testing::raw_exchange;
using testing::Reply;
using testing::TestServer;
using namespace std::chrono_literals;

// Steps of `test_gate` episodes block until the gate opens.
testing::Barrier& gate() {
  static testing::Barrier g;
  return g;
}

// Opens the gate when the test ends, however it ends (declared after the server, so it runs first): a
// failed assertion must not leave a worker blocked for the server's destructor to wait on.
struct GateOpener {
  GateOpener() { gate().reset(); }
  ~GateOpener() { gate().open(); }
};

class GateEnv : public Env {
 public:
  const EnvSpec& spec() const override {
    static const EnvSpec spec = [] {
      EnvSpec s;
      s.name = "test_gate";
      s.description = "test only: a step blocks until the test opens the gate";
      return s;
    }();
    return spec;
  }

 protected:
  Start do_reset(const Task&, Rng&) override {
    return Start{Observation{"system", {}}, Observation{"go", {}}};
  }
  StepResult do_step(const Action&) override {
    gate().enter();
    StepResult r;
    r.observation.text = "done";
    r.reward = 1.0;
    r.terminated = true;
    return r;
  }
};

const EnvRegistrar kGateEnv({"test_gate",
                             "test only: a step blocks until the test opens the gate",
                             {},
                             [](const Params&) -> std::unique_ptr<Env> {
                               return std::make_unique<GateEnv>();
                             }});

std::string create_gate_episode(uint16_t port, const std::string& task) {
  HttpClient client(port);
  const Reply reply = client.call("POST", "/v1/episodes", R"({"env":"test_gate","task_id":")" + task + "\"}");
  EXPECT_EQ(reply.status, 200) << reply.body;
  proto::StepResponse created;
  wire::decode_message(reply.body, wire::WireFormat::kJson, created);
  return created.episode_id();
}

// A step that blocks in the gate, sent from its own thread; the reply (or the error) is kept.
struct BlockedStep {
  BlockedStep(uint16_t port, const std::string& id)
      : thread([this, port, id] {
          try {
            HttpClient client(port);
            reply = client.call("POST", "/v1/episodes/" + id + "/step",
                                R"({"turn_id":0,"action":{"kind":"assistant","text":"x"}})");
          } catch (const std::exception& e) {
            error = e.what();
          }
        }) {}
  ~BlockedStep() {
    if (thread.joinable()) thread.join();
  }
  Reply reply;
  std::string error;
  std::thread thread;
};

// The issue's probe: two steps blocked (as two `sleep 12` shell steps were) with the default two I/O
// threads; /health and /v1/info still answer at once.
TEST(HttpLoad, HealthAnswersWhileStepsBlock) {
  TestServer s;
  GateOpener opener;
  const std::string a = create_gate_episode(s.port(), "a"), b = create_gate_episode(s.port(), "b");
  BlockedStep step_a(s.port(), a), step_b(s.port(), b);
  ASSERT_TRUE(gate().wait_entered(2));
  const std::string health = raw_exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", true, 20.0);
  EXPECT_EQ(health.rfind("HTTP/1.1 200", 0), 0u) << "no answer while steps block: " << health;
  const std::string info =
      raw_exchange(s.port(), "GET /v1/info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false, 20.0);
  EXPECT_EQ(info.rfind("HTTP/1.1 200", 0), 0u) << info;
  EXPECT_EQ(s.server.stats().handling, 2u);
  gate().open();
  step_a.thread.join();
  step_b.thread.join();
  EXPECT_EQ(step_a.reply.status, 200) << step_a.error << step_a.reply.body;
  EXPECT_EQ(step_b.reply.status, 200) << step_b.error << step_b.reply.body;
}

// Blocked requests do not make others wait for a thread: with two workers kept, forty steps blocked in
// environment code at once are forty handlers running (a fixed pool of two would hold 38 in its queue, as a
// trainer's concurrent rollouts were held behind the first 32). With --max-workers 2 the rest wait in the
// queue and run once the gate opens.
void block_steps_at_once(int workers, int max_workers, int steps) {
  HttpOptions http;
  http.workers = workers;
  http.max_workers = max_workers;
  TestServer s(http);
  GateOpener opener;
  std::vector<std::string> ids;
  for (int i = 0; i < steps; ++i) ids.push_back(create_gate_episode(s.port(), "t" + std::to_string(i)));
  std::vector<std::unique_ptr<BlockedStep>> blocked;
  for (const std::string& id : ids) blocked.push_back(std::make_unique<BlockedStep>(s.port(), id));
  const int running = max_workers == 0 ? steps : max_workers;
  ASSERT_TRUE(gate().wait_entered(running)) << "fewer than " << running << " steps ran at once";
  if (running < steps) {
    EXPECT_TRUE(testing::eventually([&] { return s.server.stats().queued == size_t(steps - running); }))
        << s.server.stats().queued;
    EXPECT_EQ(s.server.stats().worker_threads, size_t(max_workers));
  } else {
    EXPECT_EQ(s.server.stats().queued, 0u);
    EXPECT_GE(s.server.stats().worker_threads, size_t(steps));
  }
  EXPECT_EQ(s.server.stats().handling, size_t(steps));
  const std::string health = raw_exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", true, 20.0);
  EXPECT_EQ(health.rfind("HTTP/1.1 200", 0), 0u) << health;
  // What an operator sees of it (GET /metrics, answered on the I/O thread like /health).
  const std::string metrics = raw_exchange(s.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", true, 20.0);
  EXPECT_NE(metrics.find("\ncrl_http_requests_in_flight " + std::to_string(steps) + "\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("\ncrl_http_requests_queued " + std::to_string(steps - running) + "\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(
      metrics.find("\ncrl_http_worker_threads " + std::to_string(s.server.stats().worker_threads) + "\n"),
      std::string::npos)
      << metrics;
  gate().open();
  for (auto& step : blocked) {
    step->thread.join();
    EXPECT_EQ(step->reply.status, 200) << step->error << step->reply.body;
  }
}

TEST(HttpLoad, BlockedStepsDoNotQueueBehindTheKeptWorkers) {
  block_steps_at_once(2, 0, 40);
}

TEST(HttpLoad, PastMaxWorkersRequestsWaitInTheQueue) {
  block_steps_at_once(2, 2, 6);
}

TEST(HttpLoad, ConnectionsBeyondTheLimitGet503WithRetryAfter) {
  HttpOptions http;
  http.max_connections = 2;
  TestServer s(http);
  auto first = std::make_unique<HttpClient>(s.port());
  HttpClient second(s.port());
  EXPECT_EQ(first->call("GET", "/health").status, 200);  // both are registered once answered
  EXPECT_EQ(second.call("GET", "/health").status, 200);
  const std::string refused = raw_exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", false, 20.0);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  EXPECT_NE(refused.find("Retry-After: 1\r\n"), std::string::npos) << refused;
  EXPECT_NE(refused.find("too_many_connections"), std::string::npos) << refused;
  EXPECT_EQ(second.call("GET", "/health").status, 200);  // the open ones are still served
  // A place frees up when a client leaves (the server sees the close on its own schedule: poll, bounded).
  first.reset();
  std::string served;
  for (int attempt = 0; attempt < 600 && served.rfind("HTTP/1.1 200", 0) != 0; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(50ms);
    served = raw_exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", true, 20.0);
  }
  EXPECT_EQ(served.rfind("HTTP/1.1 200", 0), 0u) << served;
}

// SIGTERM with a step stuck in environment code: run() returns by the deadline (generous bound: deadline +
// 5 s), the stuck request gets 503 drain_deadline, and the server reports it unfinished.
TEST(HttpLoad, DrainDeadlineIsHardWithStuckWork) {
  HttpOptions http;
  http.drain_timeout_s = 1.0;
  EpisodeService service(ServiceOptions{});
  HttpServer server(TestServer::with_port0(http), service);
  GateOpener opener;  // after the server: the gate opens before the server is destroyed
  auto running = std::async(std::launch::async, [&] { server.run(); });
  const std::string id = create_gate_episode(server.port(), "stuck");
  {
    BlockedStep stuck(server.port(), id);
    ASSERT_TRUE(gate().wait_entered(1));
    server.request_stop();
    EXPECT_EQ(running.wait_for(std::chrono::duration<double>(http.drain_timeout_s + 5.0)),
              std::future_status::ready)
        << "run() did not return by the drain deadline";
    EXPECT_EQ(server.unfinished(), 1u);
    gate().open();
    stuck.thread.join();
    EXPECT_EQ(stuck.reply.status, 503) << stuck.error << stuck.reply.body;
    EXPECT_NE(stuck.reply.body.find("drain_deadline"), std::string::npos) << stuck.reply.body;
    EXPECT_FALSE(stuck.reply.keep_alive);
  }
  running.get();
}

// The drain answers a request under way (its handler finishes before the deadline) and closes it.
TEST(HttpLoad, DrainWaitsForWorkThatFinishesInTime) {
  HttpOptions http;
  http.drain_timeout_s = 600;  // never reached: the test releases the gate
  EpisodeService service(ServiceOptions{});
  HttpServer server(TestServer::with_port0(http), service);
  GateOpener opener;
  auto running = std::async(std::launch::async, [&] { server.run(); });
  const std::string id = create_gate_episode(server.port(), "finishes");
  BlockedStep step(server.port(), id);
  ASSERT_TRUE(gate().wait_entered(1));
  server.request_stop();
  // Until the step ends, the server keeps draining (bounded wait: a hang fails instead of blocking forever).
  EXPECT_EQ(running.wait_for(0s), std::future_status::timeout);
  gate().open();
  step.thread.join();
  EXPECT_EQ(step.reply.status, 200) << step.error << step.reply.body;
  EXPECT_FALSE(step.reply.keep_alive);  // Connection: close during the drain
  EXPECT_EQ(running.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(server.unfinished(), 0u);
}

}  // namespace
}  // namespace crl::server
