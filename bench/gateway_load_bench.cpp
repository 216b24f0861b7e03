// The compaction gateway with many harnesses at once (issue 18), in process on loopback, each row against
// a baseline in the same run:
//
//   BM_GatewayConcurrentSessions  256 sessions' calls at once against a 50 ms upstream: the worker pool that
//                            grows against a fixed pool of 32 (calls/s, the batch the upstream saw)
//   BM_GatewayParallelSubAgents  4 or 8 sub-agents of one harness calling at once through one session
//                            (threads) against each in its own session, 50 ms upstream (wall per round)
//   BM_GatewaySessionMemory  what a session of an 8k-token prompt holds while it lives (kept, or ended)
//   BM_GatewayThroughput     4 or 16 harnesses calling at once, as fast as answers come, through the gateway,
//                            straight to the stand-in, and through a null proxy: the server threads' CPU per
//                            call against the floor of any proxy on this machine; and through the gateway
//                            with each session ended as a trainer ends it (reward, export, delete)
//
// One-call-at-a-time rows and the gateway's handler alone: bench/gateway_bench.cpp (the same binary).
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "bench/gateway_bench_support.h"
#include "engine/heap.h"
#include "server/gateway/gateway.h"
#include "server/thread_name.h"
#include "tests/policies/llm/scripted_llm_server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace {

using namespace crl;
using namespace crl::gateway_bench;
using Clock = std::chrono::steady_clock;

// A stand-in upstream answering every call "ok, next step" after `delay_s`, a gateway in front of it, and
// the server around the gateway (`http`: its options, the gateway set here).
struct WideStack {
  WideStack(double delay_s, server::HttpOptions http) : upstream(stand_in(delay_s)) {
    server::gateway::GatewayOptions options;
    options.upstream.base_url = upstream.url();
    options.budget = Budget{65536, 16384, 2, 1024, 1024, 8};
    gateway = std::make_unique<server::gateway::Gateway>(options, nullptr);
    http.gateway = gateway.get();
    serve = std::make_unique<server::testing::TestServer>(http);
  }
  static testing::ScriptedLlmOptions stand_in(double delay_s) {
    testing::ScriptedLlmOptions llm;
    llm.log_calls = false;
    llm.script = [](std::string_view, uint64_t) { return std::string("ok, next step"); };
    llm.faults.delay_s = delay_s;
    return llm;
  }
  testing::ScriptedLlmServer upstream;
  std::unique_ptr<server::gateway::Gateway> gateway;
  std::unique_ptr<server::testing::TestServer> serve;
};

// One chat call of a harness on `session`: on success the answer and the next step's output join its
// history; false when the call failed.
bool chat_step(server::testing::HttpClient& client, const std::string& session, json& history) {
  const auto reply = client.call("POST", "/v1/sessions/" + session + "/v1/chat/completions",
                                 json{{"messages", history}}.dump());
  if (reply.status != 200) return false;
  history.push_back(json::parse(reply.body)["choices"][0]["message"]);
  history.push_back({{"role", "user"}, {"content", "output of the step: fine"}});
  return true;
}

// A trainer's sessions at once against an upstream that takes 50 ms to answer (an LLM's call; real ones take
// seconds, which only widens the gap): 256 harnesses on their own keep-alive connections, one chat call each
// per iteration, all started together (a thread each, the same cost in both rows). Arg: the server's
// --max-workers: 32 keeps the default 32 workers fixed (how every `crl serve` ran before its pool grew),
// 0 is the default (the pool grows to one thread per request in flight). Counters: calls_per_s (wall),
// round_ms (wall per iteration: all 256 answered), peak_at_upstream (the most calls inside the stand-in at
// once: the batch an inference server would have seen).
void BM_GatewayConcurrentSessions(benchmark::State& state) {
  constexpr int kSessions = 256;
  server::HttpOptions http;
  http.max_workers = static_cast<int>(state.range(0));
  WideStack wide(0.05, http);
  testing::ScriptedLlmServer& upstream = wide.upstream;
  server::testing::TestServer& serve = *wide.serve;
  std::vector<std::unique_ptr<server::testing::HttpClient>> clients;
  std::vector<json> histories;
  for (int i = 0; i < kSessions; ++i) {
    clients.push_back(std::make_unique<server::testing::HttpClient>(serve.port()));
    histories.push_back(json::array({{{"role", "system"}, {"content", "You are a bench agent."}},
                                     {{"role", "user"}, {"content", "task " + std::to_string(i)}}}));
  }
  std::atomic<int> failures{0};
  const Clock::time_point started = Clock::now();
  for (auto _ : state) {
    std::vector<std::thread> harnesses;
    for (int i = 0; i < kSessions; ++i) {
      harnesses.emplace_back([&, i] {
        if (!chat_step(*clients[i], "wide-" + std::to_string(i), histories[i])) ++failures;
      });
    }
    for (auto& harness : harnesses) harness.join();
    if (failures > 0) {
      state.SkipWithError("a gateway call failed");
      break;
    }
  }
  const double calls = static_cast<double>(state.iterations()) * kSessions;
  state.counters["calls_per_s"] = benchmark::Counter(calls, benchmark::Counter::kIsRate);
  state.counters["round_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - started).count() /
                               std::max<double>(1, static_cast<double>(state.iterations()));
  state.counters["peak_at_upstream"] = static_cast<double>(upstream.peak_in_flight());
  state.SetItemsProcessed(static_cast<int64_t>(calls));
}
BENCHMARK(BM_GatewayConcurrentSessions)->Arg(32)->Arg(0)->UseRealTime()->MinTime(2.0);

// A harness's parallel sub-agents (Claude Code's Task tool runs several at once under one Bearer token):
// N agents, each its own system prompt and task, one call each per iteration, all started together (a
// thread and a keep-alive connection each), against an upstream that takes 50 ms to answer. Args: N, and 1
// for all in one session (each agent a thread of it: gateway_session.h) or 0 for the baseline of the same
// run, each agent in a session of its own (sessions never waited for each other). Counters: round_ms (wall
// per iteration: all N answered), peak_at_upstream (the most calls inside the stand-in at once). While a
// session's lock was held across the upstream call, /N/1's round was N upstream calls end to end.
void BM_GatewayParallelSubAgents(benchmark::State& state) {
  const int agents = static_cast<int>(state.range(0));
  const bool one_session = state.range(1) != 0;
  WideStack wide(0.05, server::HttpOptions{});
  std::vector<std::unique_ptr<server::testing::HttpClient>> clients;
  std::vector<json> histories;
  for (int a = 0; a < agents; ++a) {
    clients.push_back(std::make_unique<server::testing::HttpClient>(wide.serve->port()));
    histories.push_back(json::array(
        {{{"role", "system"}, {"content", "You are sub-agent " + std::to_string(a) + "."}},
         {{"role", "user"}, {"content", "explore part " + std::to_string(a) + " of the repository"}}}));
  }
  std::atomic<int> failures{0};
  const Clock::time_point started = Clock::now();
  for (auto _ : state) {
    std::vector<std::thread> harnesses;
    for (int a = 0; a < agents; ++a) {
      harnesses.emplace_back([&, a] {
        if (!chat_step(*clients[a], one_session ? "subagents" : "subagent-" + std::to_string(a),
                       histories[a]))
          ++failures;
      });
    }
    for (auto& harness : harnesses) harness.join();
    if (failures > 0) {
      state.SkipWithError("a gateway call failed");
      break;
    }
  }
  state.counters["round_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - started).count() /
                               std::max<double>(1, static_cast<double>(state.iterations()));
  state.counters["peak_at_upstream"] = static_cast<double>(wide.upstream.peak_in_flight());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * agents);
}
BENCHMARK(BM_GatewayParallelSubAgents)
    ->Args({4, 1})
    ->Args({4, 0})
    ->Args({8, 1})
    ->Args({8, 0})
    ->UseRealTime()
    ->MinTime(1.0);

// The floor under any gateway on this machine: a proxy with no gateway logic at all. Each harness connection
// gets a thread (blocking reads and writes: the fewest syscalls and no thread hops) that reads a request,
// sends one fixed 8k-token /generate body to the stand-in over its own keep-alive connection, reads the
// answer, and writes a fixed chat.completion back. Its threads are named crl-null (their CPU is what two
// loopback HTTP exchanges per call cost here, the upstream's 40 KB body included).
class NullProxy {
 public:
  NullProxy(uint16_t upstream_port, std::string upstream_body)
      : upstream_port_(upstream_port),
        upstream_body_(std::move(upstream_body)),
        acceptor_(ioc_, server::testing::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)) {
    accepting_ = std::thread([this] {
      server::name_this_thread("crl-null");
      for (;;) {
        server::testing::tcp::socket socket(ioc_);
        boost::system::error_code error;
        acceptor_.accept(socket, error);
        if (error || stopping_) return;
        socket.set_option(server::testing::tcp::no_delay(true));
        std::lock_guard<std::mutex> lock(mutex_);
        connections_.emplace_back([this, socket = std::move(socket)]() mutable { serve(socket); });
      }
    });
  }
  ~NullProxy() {
    stopping_ = true;
    boost::system::error_code ignored;
    {  // wake the accept with a connection of our own
      server::testing::tcp::socket poke(ioc_);
      poke.connect(acceptor_.local_endpoint(), ignored);
    }
    accepting_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& t : connections_) t.join();  // each ends when its harness closes the connection
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  void serve(server::testing::tcp::socket& socket) {
    namespace http = server::testing::http;
    server::name_this_thread("crl-null");
    server::testing::HttpClient upstream(upstream_port_);
    boost::beast::flat_buffer buffer;
    buffer.reserve(64 << 10);
    const std::string answer =
        R"({"id":"chatcmpl-null","object":"chat.completion","created":0,"model":"crl","choices":[{"index":0,)"
        R"("message":{"role":"assistant","content":"ok, next step"},"finish_reason":"stop"}],)"
        R"("usage":{"prompt_tokens":8000,"completion_tokens":14,"total_tokens":8014}})";
    for (;;) {
      http::request<http::string_body> request;
      boost::system::error_code error;
      http::read(socket, buffer, request, error);
      if (error) return;
      const auto reply = upstream.call("POST", "/generate", upstream_body_);
      http::response<http::string_body> response{
          reply.status == 200 ? http::status::ok : http::status::bad_gateway, 11};
      response.set(http::field::content_type, "application/json");
      response.keep_alive(true);
      response.body() = answer;
      response.prepare_payload();
      http::write(socket, response, error);
      if (error) return;
    }
  }

  uint16_t upstream_port_;
  std::string upstream_body_;
  boost::asio::io_context ioc_;
  server::testing::tcp::acceptor acceptor_;
  std::atomic<bool> stopping_{false};
  std::thread accepting_;
  std::mutex mutex_;
  std::vector<std::thread> connections_;
};

// A trainer's end of a session (slime's adapter: reward, export, delete); false when any of the three fails.
bool end_session(server::testing::HttpClient& client, const std::string& id) {
  const std::string base = "/v1/sessions/" + id;
  return client.call("POST", base + "/reward", R"({"reward": 1.0})").status == 200 &&
         client.call("GET", base + "/export").status == 200 && client.call("DELETE", base).status == 200;
}

// Calls per second per core of gateway work when the gateway is busy (the goal's regime: a trainer's many
// harnesses at 8k-token contexts), not one call at a time on an idle machine. Args: harnesses at once (each
// a thread with its own session and keep-alive connection, calling as soon as its answer comes, for 3 s of
// wall time, against a stand-in upstream that answers at once), and 1 for the direct twin: the same
// harnesses calling the stand-in straight with 8k-token /generate bodies, the baseline of the same run, or 2
// for the same harnesses through NullProxy (above: the floor of any proxy's CPU per call here), or 3 for the
// gateway with each session ended the way a trainer ends it: every 32 turns, when a harness starts afresh, it
// posts the old session's reward, fetches its export and deletes it (row 0 leaves them all in the gateway
// until the run ends). Those three requests are gateway work but not calls: their CPU is in server_cpu_us,
// spread over the 32 chat calls.
// Counters: calls_per_s (wall), server_cpu_us (CPU of the server's threads, crl-io and crl-worker, per call:
// the gateway's whole work, its two HTTP exchanges' and wake-ups' kernel time included),
// gateway_calls_per_core_s = 1e6 / server_cpu_us, process_cpu_us (every thread: harnesses, server,
// stand-in; the gateway row's minus the twin's is what the gateway adds to a call at this load), p50_us;
// server_user_us / server_sys_us: the server threads' CPU per call in user space and in the kernel (clock
// ticks of /proc stat, so they sum to about server_cpu_us); server_faults: those threads' page faults per
// call (fresh memory touched: sessions kept, row 0, grow; ended ones, row 3, give theirs back for reuse);
// server_vol_cs / server_invol_cs: those threads' voluntary and involuntary context switches per call (a
// blocking proxy's floor: 2 voluntary).
void BM_GatewayThroughput(benchmark::State& state) {
  const int harnesses = static_cast<int>(state.range(0));
  const bool direct = state.range(1) == 1;
  const bool trainer_ends_sessions = state.range(1) == 3;
  keep_freed_memory();  // the heap as `crl serve` tunes it (cli/serve_command.cpp)
  merge_small_blocks_on_free();
  server::HttpOptions http;
  http.max_body_bytes = 64u << 20;
  WideStack wide(0, http);
  testing::ScriptedLlmServer& upstream = wide.upstream;
  server::testing::TestServer& serve = *wide.serve;
  const std::string direct_body = direct_generate_body();
  std::optional<NullProxy> null_proxy;
  if (state.range(1) == 2) null_proxy.emplace(upstream.port(), direct_body);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<int64_t> calls{0};
  std::vector<std::vector<double>> latencies(harnesses);
  const auto harness = [&](int index) {
    server::testing::HttpClient client(direct       ? upstream.port()
                                       : null_proxy ? null_proxy->port()
                                                    : serve.port());
    int session = 0, turns = 0;
    json messages;
    std::string path;
    const auto fresh = [&] {
      if (session > 0 && trainer_ends_sessions &&
          !end_session(client, "tp-" + std::to_string(index) + "-" + std::to_string(session - 1))) {
        ++failures;
      }
      path = "/v1/sessions/tp-" + std::to_string(index) + "-" + std::to_string(session++) +
             "/v1/chat/completions";
      messages = json::array({{{"role", "system"}, {"content", "You are a bench agent."}},
                              {{"role", "user"}, {"content", std::string(kContext, 'x')}}});
    };
    fresh();
    while (!stop.load(std::memory_order_relaxed)) {
      // The direct twin's harness keeps the same history and writes the same body (then sends the ids in
      // its place), so that the two rows' process_cpu_us differ by what the gateway adds alone.
      const std::string body = json{{"messages", messages}}.dump();
      const Clock::time_point start = Clock::now();
      const auto reply =
          direct ? client.call("POST", "/generate", direct_body) : client.call("POST", path, body);
      latencies[index].push_back(std::chrono::duration<double>(Clock::now() - start).count());
      if (reply.status != 200) {
        ++failures;
        return;
      }
      ++calls;
      const json answer = json::parse(reply.body);
      messages.push_back(direct ? json{{"role", "assistant"}, {"content", answer["text"]}}
                                : answer["choices"][0]["message"]);
      messages.push_back({{"role", "user"}, {"content", "output of the step: fine"}});
      if (++turns % 32 == 0) fresh();  // stay near 8k tokens
    }
  };
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int i = 0; i < harnesses; ++i) threads.emplace_back(harness, i);
    // Half a second to warm up (connections, the pool's threads, sessions' first calls), then 3 s measured;
    // the end is read before the harnesses stop (a NullProxy thread ends with its connection, its CPU with
    // it).
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const int64_t calls_start = calls.load();
    const double server_start = named_threads_cpu_seconds("crl-");
    const UserSys split_start = named_threads_user_sys_seconds("crl-");
    const ContextSwitches switches_start = named_threads_context_switches("crl-");
    const double process_start = process_cpu_seconds();
    const Clock::time_point started = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const double server_cpu = named_threads_cpu_seconds("crl-") - server_start;
    const UserSys split_end = named_threads_user_sys_seconds("crl-");
    const ContextSwitches switches_end = named_threads_context_switches("crl-");
    const double process_cpu = process_cpu_seconds() - process_start;
    const double n = std::max<double>(1, static_cast<double>(calls.load() - calls_start));
    const double wall = std::chrono::duration<double>(Clock::now() - started).count();
    stop = true;
    for (auto& t : threads) t.join();
    state.SetIterationTime(wall);
    state.counters["calls_per_s"] = n / wall;
    state.counters["server_cpu_us"] = server_cpu / n * 1e6;
    state.counters["gateway_calls_per_core_s"] = server_cpu > 0 ? n / server_cpu : 0;
    state.counters["process_cpu_us"] = process_cpu / n * 1e6;
    state.counters["server_user_us"] = (split_end.user - split_start.user) / n * 1e6;
    state.counters["server_sys_us"] = (split_end.sys - split_start.sys) / n * 1e6;
    state.counters["server_faults"] = (split_end.faults - split_start.faults) / n;
    state.counters["server_vol_cs"] = (switches_end.voluntary - switches_start.voluntary) / n;
    state.counters["server_invol_cs"] = (switches_end.involuntary - switches_start.involuntary) / n;
    state.SetItemsProcessed(static_cast<int64_t>(n));
  }
  if (failures > 0) state.SkipWithError("a call failed");
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  state.counters["p50_us"] = percentile(all, 0.5) * 1e6;
}
BENCHMARK(BM_GatewayThroughput)
    ->Args({4, 0})
    ->Args({4, 1})
    ->Args({4, 2})
    ->Args({4, 3})
    ->Args({16, 0})
    ->Args({16, 1})
    ->Args({16, 2})
    ->Args({16, 3})
    ->Iterations(1)
    ->UseManualTime();

// The heap's bytes in use (glibc's mallinfo2: allocated blocks, mapped ones included), which, unlike the
// resident size, does not depend on what earlier rows freed and the heap kept.
double heap_bytes_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}

// What a session holds while it lives (for sizing a gateway: sessions are kept until their trainer ends
// them): 64 sessions one after another on one connection, each a system message and an 8k-token user
// message, then `turns` more calls (an answer and a short tool output each), left in the gateway (arg 0) or
// ended after their last call as a trainer ends them, reward, export and delete (arg 1: the baseline, memory
// the heap reuses for the next session). Counters: kb_per_session (the heap's bytes in use after the 64
// against before, per session), calls.
void BM_GatewaySessionMemory(benchmark::State& state) {
  constexpr int kSessions = 64;
  const int turns = static_cast<int>(state.range(0));
  const bool ended = state.range(1) == 1;
  keep_freed_memory();  // the heap as `crl serve` tunes it
  merge_small_blocks_on_free();
  server::HttpOptions http;
  http.max_body_bytes = 64u << 20;
  WideStack wide(0, http);
  server::testing::HttpClient client(wide.serve->port());
  double per_session = 0;
  int64_t calls = 0;
  for (auto _ : state) {
    // A first session outside the measure: connections, threads and the heap's first growth.
    const auto run_session = [&](const std::string& id) {
      json history = json::array({{{"role", "system"}, {"content", "You are a bench agent."}},
                                  {{"role", "user"}, {"content", std::string(kContext, 'x')}}});
      for (int t = 0; t <= turns; ++t) {
        if (!chat_step(client, id, history)) return false;
        ++calls;
      }
      return !ended || end_session(client, id);
    };
    if (!run_session("memory-warm-" + std::to_string(turns))) return state.SkipWithError("a call failed");
    const double before = heap_bytes_in_use();
    for (int i = 0; i < kSessions; ++i) {
      if (!run_session("memory-" + std::to_string(i))) return state.SkipWithError("a call failed");
    }
    per_session = (heap_bytes_in_use() - before) / kSessions;
  }
  state.counters["kb_per_session"] = per_session / 1024;
  state.counters["calls"] = static_cast<double>(calls);
}
BENCHMARK(BM_GatewaySessionMemory)
    ->Args({0, 0})
    ->Args({32, 0})
    ->Args({32, 1})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
