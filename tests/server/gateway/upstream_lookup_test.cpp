// The upstream's host name (server/gateway/host_lookup.h): looked up off the calling thread, shared by the
// calls that need it while it runs, and left behind by a call whose deadline passes, by cancel() and by a
// server that stops; numeric addresses need no lookup. The DNS server is this test binary's getaddrinfo
// (below), which can hang on one name until the test lets it go.
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "server/gateway/host_lookup.h"
#include "tests/server/gateway/gateway_fixture.h"
#include "tests/server/wait_helpers.h"

// getaddrinfo for this test binary. "slow-dns.test" hangs (at most 10 s) until StuckDns::release(), then
// resolves to 127.0.0.1; "no-such-host.test" fails at once with EAI_NONAME; every other name goes to the C
// library's. Each hold() starts a generation: a lookup waits for the release of the generation it began in,
// and counts only in that generation's numbers, so a lookup left from an earlier test (released, but not yet
// back from its wait) never counts in a later one.
struct StuckDns {
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::condition_variable& changed() {
    static std::condition_variable c;
    return c;
  }
  static inline int generation = 0;
  static inline int released = 0;  // the last generation released
  static inline int waiting = 0;   // lookups of this generation waiting
  static inline int peak = 0;      // the most lookups waiting at once since hold()
  static inline int lookups = 0;   // lookups of "slow-dns.test" since hold()
  // Makes the next lookups of "slow-dns.test" hang.
  static void hold() {
    std::lock_guard lock(mutex());
    ++generation;
    waiting = 0;
    peak = 0;
    lookups = 0;
  }
  static void release() {
    std::lock_guard lock(mutex());
    released = generation;
    changed().notify_all();
  }
  static int in_lookup() {
    std::lock_guard lock(mutex());
    return waiting;
  }
  static int most_at_once() {
    std::lock_guard lock(mutex());
    return peak;
  }
  static int started() {
    std::lock_guard lock(mutex());
    return lookups;
  }
};

extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints, addrinfo** found) {
  using Real = int (*)(const char*, const char*, const addrinfo*, addrinfo**);
  static const Real real = reinterpret_cast<Real>(::dlsym(RTLD_NEXT, "getaddrinfo"));
  if (node != nullptr && std::string_view(node) == "no-such-host.test") return EAI_NONAME;
  if (node != nullptr && std::string_view(node) == "slow-dns.test") {
    std::unique_lock lock(StuckDns::mutex());
    const int mine = StuckDns::generation;
    ++StuckDns::lookups;
    StuckDns::peak = std::max(StuckDns::peak, ++StuckDns::waiting);
    StuckDns::changed().notify_all();
    StuckDns::changed().wait_for(lock, std::chrono::seconds(10), [&] { return StuckDns::released >= mine; });
    if (StuckDns::generation == mine) --StuckDns::waiting;
    node = "127.0.0.1";
  }
  return real(node, service, hints, found);
}

namespace crl::server::gateway::testing {
namespace {

using server::testing::eventually;

// True once `pending`'s eventfd is readable (false after 10 s: a hang).
bool signalled(const HostLookup::Pending& pending) {
  pollfd fd{pending.fd(), POLLIN, 0};
  return ::poll(&fd, 1, 10000) == 1 && (fd.revents & POLLIN) != 0;
}

uint16_t port_of(const HostAddress& a) {
  return a.family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in&>(a.address).sin_port)
                             : ntohs(reinterpret_cast<const sockaddr_in6&>(a.address).sin6_port);
}

TEST(HostLookup, ANumericAddressIsConvertedAtOnce) {
  HostLookup v4("127.0.0.1", 8080);
  const auto a = v4.start();
  ASSERT_TRUE(a->done());
  EXPECT_TRUE(signalled(*a));
  EXPECT_EQ(a->error(), "");
  ASSERT_EQ(a->addresses().size(), 1u);
  EXPECT_EQ(a->addresses()[0].family, AF_INET);
  EXPECT_EQ(a->addresses()[0].length, sizeof(sockaddr_in));
  EXPECT_EQ(port_of(a->addresses()[0]), 8080);
  EXPECT_EQ(v4.start().get(), a.get()) << "a numeric address is converted once, not per connection";

  HostLookup v6("::1", 30000);
  const auto b = v6.start();
  ASSERT_TRUE(b->done());
  ASSERT_EQ(b->addresses().size(), 1u);
  EXPECT_EQ(b->addresses()[0].family, AF_INET6);
  EXPECT_EQ(port_of(b->addresses()[0]), 30000);
}

// A name is looked up on a thread of its own: start() returns while the DNS server hangs, a second start()
// meanwhile shares the lookup in flight, the eventfd becomes readable when it ends, and a start() after that
// looks the name up again (DNS changes are seen by each new connection).
TEST(HostLookup, ANameIsLookedUpOffTheCallersThreadOnceWhileInFlight) {
  StuckDns::hold();
  HostLookup lookup("slow-dns.test", 9000);
  const auto first = lookup.start();
  const auto second = lookup.start();
  EXPECT_EQ(first.get(), second.get()) << "a second lookup started while the first was in flight";
  ASSERT_TRUE(eventually([] { return StuckDns::in_lookup() == 1; }));
  EXPECT_FALSE(first->done());
  StuckDns::release();
  ASSERT_TRUE(signalled(*first));
  ASSERT_TRUE(first->done());
  EXPECT_EQ(first->error(), "");
  ASSERT_FALSE(first->addresses().empty());
  EXPECT_EQ(port_of(first->addresses()[0]), 9000);
  EXPECT_EQ(StuckDns::started(), 1);

  const auto again = lookup.start();
  EXPECT_NE(again.get(), first.get());
  ASSERT_TRUE(signalled(*again));
  EXPECT_EQ(StuckDns::started(), 2);
}

TEST(HostLookup, AFailedLookupSaysWhy) {
  HostLookup lookup("no-such-host.test", 80);
  const auto pending = lookup.start();
  ASSERT_TRUE(signalled(*pending));
  ASSERT_TRUE(pending->done());
  EXPECT_TRUE(pending->addresses().empty());
  EXPECT_EQ(pending->error(), ::gai_strerror(EAI_NONAME));
}

// The stand-in upstream named by `host` in the gateway's --llm URL (its options adjusted by `adjust`), and a
// server (`http`, with one I/O thread) in front.
struct UpstreamByName {
  UpstreamByName(const std::string& host, HttpOptions http,
                 const std::function<void(UpstreamOptions&)>& adjust = {})
      : upstream(stand_in()) {
    GatewayOptions options;
    options.upstream.base_url = "http://" + host + ":" + std::to_string(upstream.port());
    options.budget = test_budget();
    if (adjust) adjust(options.upstream);
    gateway = std::make_unique<Gateway>(options, nullptr);
    http.threads = 1;
    http.gateway = gateway.get();
    serve = std::make_unique<server::testing::TestServer>(http);
  }
  static crl::testing::ScriptedLlmOptions stand_in() {
    crl::testing::ScriptedLlmOptions llm;
    llm.script = harness_script;
    return llm;
  }
  static void short_deadline(UpstreamOptions& upstream) {
    upstream.request_timeout_s = 0.3;
    upstream.max_retries = 0;
  }
  uint16_t port() const { return serve->port(); }

  crl::testing::ScriptedLlmServer upstream;
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<server::testing::TestServer> serve;
};

// Each test on both paths: a fiber waits through its I/O thread's loop, a worker thread in poll(2).
class UpstreamLookup : public BothPaths {};

// An upstream named by host name ("localhost": /etc/hosts, no DNS server needed): the call is answered, and
// the lane's connection is reused for the session's next call.
TEST_P(UpstreamLookup, AnUpstreamNamedByItsHostIsResolved) {
  UpstreamByName bench("localhost", http());
  Harness h(bench.port(), "by-name");
  for (int turn = 0; turn < 2; ++turn) {
    const json answer = h.turn();
    ASSERT_EQ(h.last.status, 200) << h.last.body;
    EXPECT_EQ(answer["choices"][0]["message"]["content"], "ack m0 " + std::to_string(turn));
    h.add("user", "next");
  }
  EXPECT_EQ(bench.upstream.connections(), 1u);
}

// A DNS server that does not answer: the call's deadline still ends the call. The harness gets its 504
// while the lookup is still stuck; once the name resolves, the next call goes through.
TEST_P(UpstreamLookup, AStuckDnsLookupMeetsTheCallsDeadline) {
  StuckDns::hold();
  UpstreamByName bench("slow-dns.test", http(), UpstreamByName::short_deadline);
  Harness h(bench.port(), "stuck-dns");
  const auto reply = h.post({{"model", "test"}, {"messages", h.messages}});
  const int stuck = StuckDns::in_lookup();
  StuckDns::release();
  EXPECT_EQ(reply.status, 504) << reply.body;
  const json error = json::parse(reply.body)["error"];
  EXPECT_EQ(error["code"], "upstream_timeout") << reply.body;
  EXPECT_NE(error["message"].get<std::string>().find("slow-dns.test"), std::string::npos) << reply.body;
  EXPECT_EQ(stuck, 1) << "the answer waited for the lookup instead of the deadline";
  h.turn();
  EXPECT_EQ(h.last.status, 200) << h.last.body;
}

// Eight sessions' first calls at once while the DNS server hangs: one lookup serves them all (one stuck
// thread, not one per connection attempt), and each call still ends at its own deadline.
TEST_P(UpstreamLookup, CallsAtOnceShareOneStuckLookup) {
  StuckDns::hold();
  UpstreamByName bench("slow-dns.test", http(), UpstreamByName::short_deadline);
  std::vector<int> statuses(8);
  std::vector<std::thread> harnesses;
  for (int i = 0; i < 8; ++i) {
    harnesses.emplace_back([&, i] {
      Harness h(bench.port(), "shared-" + std::to_string(i));
      statuses[i] = h.post({{"model", "test"}, {"messages", h.messages}}).status;
    });
  }
  for (auto& t : harnesses) t.join();
  const int lookups = StuckDns::started(), at_once = StuckDns::most_at_once();
  StuckDns::release();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(statuses[i], 504) << "harness " << i;
  EXPECT_EQ(lookups, 1);
  EXPECT_EQ(at_once, 1);
}

// The server and its gateway go away while a lookup is stuck: nothing waits for it (asio's resolver, used
// before, joined its thread when the io_context was destroyed, so the exit waited for the DNS server).
TEST_P(UpstreamLookup, TheServerStopsWhileALookupIsStuck) {
  StuckDns::hold();
  auto bench = std::make_unique<UpstreamByName>("slow-dns.test", http(), UpstreamByName::short_deadline);
  {
    Harness h(bench->port(), "exit");
    EXPECT_EQ(h.post({{"model", "test"}, {"messages", h.messages}}).status, 504);
  }
  ASSERT_EQ(StuckDns::in_lookup(), 1);
  bench.reset();
  const int stuck = StuckDns::in_lookup();
  StuckDns::release();
  EXPECT_EQ(stuck, 1) << "the server's exit waited for the stuck lookup";
}

// The drain deadline passes while a call waits for a stuck lookup, well inside --llm-timeout: cancel() ends
// the wait, the harness gets 503 drain_deadline, and run() returns while the lookup is still stuck.
TEST_P(UpstreamLookup, TheDrainDeadlineEndsACallWaitingForALookup) {
  StuckDns::hold();
  HttpOptions o = http();
  o.drain_timeout_s = 0.2;
  UpstreamByName bench("slow-dns.test", o, [](UpstreamOptions& upstream) {
    upstream.request_timeout_s = 120;
    upstream.max_retries = 0;
  });
  std::thread harness([&] {
    Harness h(bench.port(), "drain");
    const auto reply = h.post({{"model", "test"}, {"messages", h.messages}});
    EXPECT_EQ(reply.status, 503) << reply.body;
    EXPECT_NE(reply.body.find("drain_deadline"), std::string::npos) << reply.body;
  });
  ASSERT_TRUE(eventually([] { return StuckDns::in_lookup() == 1; }));
  bench.serve->server.request_stop();
  harness.join();
  bench.serve->thread.join();
  const int stuck = StuckDns::in_lookup();
  StuckDns::release();
  EXPECT_EQ(stuck, 1) << "the drain waited for the stuck lookup";
  bench.serve->thread = std::thread([] {});  // for TestServer's destructor
}

// A name the DNS server does not know: the harness gets an OpenAI-shaped 503 that names the host and says
// why, at once.
TEST_P(UpstreamLookup, AnUnknownHostIsAnUnavailableUpstream) {
  UpstreamByName bench("no-such-host.test", http());
  Harness h(bench.port(), "unknown-host");
  const auto reply = h.post({{"model", "test"}, {"messages", h.messages}});
  EXPECT_EQ(reply.status, 503) << reply.body;
  const json error = json::parse(reply.body)["error"];
  EXPECT_EQ(error["code"], "upstream_unavailable") << reply.body;
  const std::string message = error["message"];
  EXPECT_NE(message.find("no-such-host.test"), std::string::npos) << message;
  EXPECT_NE(message.find(::gai_strerror(EAI_NONAME)), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(InlineAndPool, UpstreamLookup, ::testing::Bool(), path_name);

}  // namespace
}  // namespace crl::server::gateway::testing
