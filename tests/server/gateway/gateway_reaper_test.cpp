// The idle reaper of gateway sessions (crl serve --idle-timeout, like the episodes' reaper): a session no
// call touched for the timeout is removed, by Gateway::reap_idle() and by the server's reaper timer.
#include <chrono>
#include <thread>

#include "tests/server/gateway/gateway_fixture.h"
#include "tests/server/wait_helpers.h"

namespace crl::server::gateway::testing {
namespace {

GatewayOptions with_idle(double seconds) {
  GatewayOptions options;
  options.idle_timeout_s = seconds;
  return options;
}

TEST(GatewayReaper, IdleSessionsAreRemovedAndTheIdCanStartAgain) {
  Bench bench(llm::ApiKind::kSglang, {}, with_idle(0.02));
  Harness h(bench.port(), "idle");
  h.turn();
  Harness ended(bench.port(), "ended-not-exported");
  ended.turn();
  ASSERT_EQ(ended.reward(1.0).status, 200);
  ASSERT_EQ(bench.gateway->sessions(), 2u);
  // Bounded wait for the timeout to pass (the timeout is tiny; no timing is asserted).
  size_t reaped = 0;
  for (int i = 0; i < 500 && reaped < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    reaped += bench.gateway->reap_idle();
  }
  EXPECT_EQ(reaped, 2u);
  EXPECT_EQ(bench.gateway->sessions(), 0u);
  EXPECT_EQ(h.client.call("GET", "/v1/sessions/idle").status, 404);
  EXPECT_EQ(h.client.call("GET", "/v1/sessions/ended-not-exported/export").status, 404);
  // The id starts a fresh session (the harness's history is a new first call).
  h.messages.erase(h.messages.size() - 1);
  h.turn();
  EXPECT_EQ(h.state()["upstream_calls"], 1);
}

TEST(GatewayReaper, RecentlyUsedSessionsStay) {
  Bench bench(llm::ApiKind::kSglang, {}, with_idle(3600));
  Harness h(bench.port(), "busy");
  h.turn();
  EXPECT_EQ(bench.gateway->reap_idle(), 0u);
  EXPECT_EQ(bench.gateway->sessions(), 1u);
}

// A session whose call waits for the upstream far past the timeout is not idle, though its lock is free
// meanwhile (other threads' calls go on): the call is answered and recorded, and the session stays.
TEST(GatewayReaper, ASessionWaitingForItsUpstreamIsNotIdle) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 2;
  Bench bench(llm::ApiKind::kSglang, faults, with_idle(0.02));
  Harness h(bench.port(), "waiting");
  std::thread call([&] { h.turn(); });
  EXPECT_TRUE(server::testing::eventually([&] { return bench.upstream->attempts() >= 1; }));
  size_t reaped = 0;
  for (int i = 0; i < 20; ++i) {  // (0.2 s: ten timeouts, well within the upstream's delay)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    reaped += bench.gateway->reap_idle();
  }
  call.join();
  EXPECT_EQ(reaped, 0u);
  EXPECT_EQ(h.last.status, 200) << h.last.body;
  ASSERT_EQ(h.reward(1).status, 200);
  EXPECT_EQ(h.export_json()["segments"].size(), 1u);
}

TEST(GatewayReaper, TheServersReaperTimerReapsGatewaySessions) {
  ServiceOptions service;
  service.idle_timeout_s = 0.05;  // crl serve --idle-timeout: the timer's period follows it
  Bench bench(llm::ApiKind::kSglang, {}, with_idle(0.05), {}, service);
  Harness h(bench.port(), "timer");
  h.turn();
  // Polled without a request (a request to the session would count as its use).
  for (int i = 0; i < 1000 && bench.gateway->sessions() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(bench.gateway->sessions(), 0u);
  EXPECT_EQ(h.client.call("GET", "/v1/sessions/timer").status, 404);
}

}  // namespace
}  // namespace crl::server::gateway::testing
