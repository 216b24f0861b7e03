#pragma once
// Private to the HTTP transport (server/http_server.cpp, server/http_connection.cpp), included by nothing
// else: the server's shared state (HttpServer::Impl), the owned request handed to handlers, and the
// transport's constants. The namespace aliases below are for these two files.
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/http_server.h"
#include "server/worker_pool.h"

namespace crl::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

inline Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}
// A refused request or connection (server/connection_refusal.h): its input is read and dropped after the
// answer for at most this long.
inline constexpr auto kRefusalLinger = std::chrono::seconds(1);

class HttpConnection;

// A request, owned, for the worker pool.
struct OwnedCall {
  std::string method, target, content_type, accept, body;
  std::string authorization = {}, routing_key = {}, api_key = {};  // for the gateway (server/gateway)
  server::gateway::Gateway* gateway = nullptr;
  HttpCall view(bool draining) const {
    return HttpCall{method,   target,  content_type,  accept,      body,
                    draining, gateway, authorization, routing_key, api_key};
  }
};

// The worker pool's bounds from HttpOptions: `workers` threads kept, growing to `max_workers` (0: to one
// per request that can be in flight, one per connection plus the reaper's).
WorkerPool::Options worker_pool_options(const HttpOptions& options);

struct HttpServer::Impl {
  Impl(HttpOptions o, EpisodeService& s)
      : options(std::move(o)),
        service(s),
        strand(net::make_strand(ioc)),
        acceptor(strand),
        signals(strand),
        reaper(strand),
        drain_deadline(strand),
        deadline_grace(strand),
        accept_retry(strand),
        sweeper(strand),
        pool(worker_pool_options(options)) {
    for (int i = 1; i < options.threads; ++i) more.push_back(std::make_unique<net::io_context>(1));
  }

  void accept();
  void refuse_connection(tcp::socket socket);
  void schedule_reap();
  void schedule_sweep();
  void begin_drain();         // on `strand`
  void on_drain_deadline();   // on `strand`
  void maybe_finish_drain();  // on `strand`
  void submit(std::shared_ptr<HttpConnection> connection, OwnedCall call);
  // A gateway call run on a fiber on the I/O thread that read it (HttpOptions::gateway_inline): true when it
  // was taken, false to submit() it instead.
  bool try_inline(std::shared_ptr<HttpConnection>& connection, OwnedCall& call);
  // The handler of a routed request (routes, then route()); nullopt when the drain deadline had passed
  // before it started. The caller counts it out of in_flight (handled_one()) once its answer is produced.
  std::optional<HttpAnswer> handle(const OwnedCall& call, const AnswerStarter* begin_answer = nullptr);
  void handled_one();
  // The drain deadline passed: in-flight upstream calls of the gateway are cancelled, so that a call blocked
  // on a silent LLM returns (its connection has had its 503) and run() is not held by an I/O thread.
  void cancel_upstream();
  // Runs `work` on the worker pool, counted in in_flight like a routed request (the drain waits for it);
  // not run at all once the drain deadline has passed.
  void run_on_pool(std::function<void()> work);
  std::vector<std::shared_ptr<HttpConnection>> live();
  void add(uint64_t id, std::weak_ptr<HttpConnection> connection) {
    std::lock_guard lock(mutex);
    connections.emplace(id, std::move(connection));
  }
  ~Impl() {
    stopped = true;
    pool.stop();  // requests queued and not started are dropped; running ones are waited for
    pool.join();
  }
  // Idempotent: called when a connection closes and again when it is destroyed.
  void remove(uint64_t id) {
    std::lock_guard lock(mutex);
    if (connections.erase(id) == 0) return;
    if (draining && connections.empty() && !stopped) net::post(strand, [this] { maybe_finish_drain(); });
  }

  HttpOptions options;
  EpisodeService& service;
  // Declared before the io_context: its destruction destroys pending handlers, hence connections, which
  // unregister here.
  std::mutex mutex;
  std::map<uint64_t, std::weak_ptr<HttpConnection>> connections;  // open connections (closed ones leave)
  std::atomic<bool> draining{false};
  std::atomic<bool> deadline_passed{false};
  std::atomic<bool> stopped{false};
  std::atomic<bool> reaping{false};
  std::atomic<size_t> in_flight{0};  // requests handed to the pool whose handler has not returned
  std::atomic<int> refusing{0};
  std::atomic<int> fibers{0};      // gateway calls on fibers (try_inline) not yet ended
  std::atomic<size_t> reading{0};  // connections with part of a request received
  // One event loop per I/O thread (concurrency hint 1: no locking between threads inside a loop, and a
  // handler's continuations stay on its thread). `ioc` is run by run()'s calling thread and holds the
  // acceptor, signals and timers; `more` are the further threads'. A connection lives on one loop (round
  // robin at accept), and so do its gateway calls' fibers: a call's work, its upstream socket and its
  // answer never cross threads, where one loop shared by every thread woke another thread for about each
  // handler (issue 18's profile: 4 to 6.5 context switches per gateway call, against 1.7 here).
  // `more` is declared first so that it is destroyed last: `ioc`'s pending accept holds a socket of the loop
  // it was meant for, destroyed with `ioc`.
  std::vector<std::unique_ptr<net::io_context>> more;
  net::io_context ioc{1};
  std::atomic<size_t> next_loop{0};
  net::io_context& loop_for_connection() {
    const size_t n = next_loop.fetch_add(1, std::memory_order_relaxed) % (more.size() + 1);
    return n == 0 ? ioc : *more[n - 1];
  }
  void stop_loops() {
    ioc.stop();
    for (auto& loop : more) loop->stop();
  }
  net::strand<net::io_context::executor_type> strand;  // the acceptor, signals and timers
  tcp::acceptor acceptor;
  net::signal_set signals;
  net::steady_timer reaper;
  net::steady_timer drain_deadline;
  net::steady_timer deadline_grace;
  net::steady_timer accept_retry;
  net::steady_timer sweeper;  // request deadlines, checked a few times per timeout
  // Declared after the io_context, so destroyed (joined) first: its queued handlers hold work guards on the
  // io_context and connections that unregister above.
  WorkerPool pool;
  uint64_t next_connection_id = 0;
  uint16_t port = 0;
  uint64_t metrics_token = 0;  // ServerMetrics::set_transport's, for the destructor's clear_transport
};

}  // namespace crl::server
