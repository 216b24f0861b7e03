#include "server/http_server.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <csignal>
#include <thread>

#include "engine/error.h"
#include "server/connection_refusal.h"
#include "server/fiber.h"
#include "server/gateway/gateway.h"
#include "server/http_connection.h"
#include "server/http_server_impl.h"
#include "server/router.h"
#include "server/thread_name.h"

namespace crl::server {

namespace {
// After the drain deadline, the time given to write the 503 answers before run() returns.
constexpr auto kDeadlineGrace = std::chrono::seconds(1);
// Refused connections lingering at once at most; beyond, they are closed without an answer.
constexpr int kMaxRefusing = 64;
// A worker thread beyond --workers that has had nothing to do for this long leaves.
constexpr auto kWorkerIdleExit = std::chrono::seconds(10);
}  // namespace

WorkerPool::Options worker_pool_options(const HttpOptions& options) {
  WorkerPool::Options out;
  out.min_threads = static_cast<size_t>(std::max(1, options.workers));
  out.max_threads = options.max_workers > 0 ? static_cast<size_t>(options.max_workers)
                                            : size_t{options.max_connections} + 1;
  out.max_threads = std::max(out.max_threads, out.min_threads);
  out.idle_exit = kWorkerIdleExit;
  return out;
}

std::optional<HttpAnswer> HttpServer::Impl::handle(const OwnedCall& call, const AnswerStarter* begin_answer) {
  // Started after the drain deadline: its connection has had its 503 and the server is going away.
  std::optional<HttpAnswer> handled;
  HttpCall view = call.view(draining);
  view.begin_answer = begin_answer;
  if (!deadline_passed && options.routes) handled = options.routes(view);
  if (!deadline_passed && !handled) handled = route(service, view);
  return handled;
}

void HttpServer::Impl::handled_one() {
  if (--in_flight == 0 && draining) net::post(strand, [this] { maybe_finish_drain(); });
}

namespace {
// A streamed answer's connection takes what its producer put in the pipe (on its strand).
void wake_to_pump(const std::shared_ptr<HttpConnection>& connection) {
  net::post(connection->executor(), [connection] { connection->pump(); });
}
}  // namespace

void HttpServer::Impl::submit(std::shared_ptr<HttpConnection> connection, OwnedCall call) {
  ++in_flight;
  pool.post([this, connection = std::move(connection), call = std::move(call),
             guard = net::make_work_guard(ioc)]() mutable {
    std::optional<HttpAnswer> handled = handle(call);
    if (!handled || !handled->stream) {
      // Counted out before the answer is posted: a client that has its answer sees the handler finished.
      handled_one();
      if (handled) {
        net::post(connection->executor(), [connection, handled = std::move(*handled)]() mutable {
          connection->on_handled(std::move(handled));
        });
      }
      return;
    }
    // A streamed answer: its head goes out now; the producer runs here, still counted in in_flight (the
    // drain waits for it), each piece waking the connection when no wake-up is pending.
    const auto produce = std::move(handled->stream);
    handled->stream = nullptr;
    auto pipe = std::make_shared<BodyPipe>();
    const auto wake = [&connection] { wake_to_pump(connection); };
    if (!handled->body.empty() && pipe->put(handled->body)) wake();
    handled->body.clear();
    net::post(connection->executor(), [connection, pipe, handled = std::move(*handled)]() mutable {
      connection->on_handled(std::move(handled), std::move(pipe));
    });
    bool complete = true;
    try {
      produce([&](std::string_view piece) {
        if (pipe->gone()) return false;
        if (!piece.empty() && pipe->put(piece)) wake();
        return true;
      });
    } catch (...) {  // (LmService's producers do not throw; a failure must not escape a pool thread)
      complete = false;
    }
    handled_one();
    if (pipe->end(complete)) wake();
  });
}

// Why: a gateway call handed to the pool and back crosses two threads (I/O -> worker -> I/O), two scheduler
// wake-ups that cost more than the gateway's own work on a busy machine (issue 18's added latency); and run
// on the I/O thread as a blocking call, it held that thread for the upstream's whole answer. Here the call
// runs on a fiber (server/fiber.h) on the I/O thread that read it: where it waits (the upstream's socket,
// the session's lock) the fiber suspends and the thread serves other connections, so every gateway call
// runs this way whatever the number of I/O threads. The fiber lives on the connection's strand: its first
// slice runs inside this handler and its answer is dispatched in place, with no round through the event loop
// (4.3 epoll_wait calls per call instead of 6 with a strand of its own); the strand is free whenever the
// fiber is suspended, so the drain deadline's 503 still goes out. Per-session ordering is the session's
// lock.
bool HttpServer::Impl::try_inline(std::shared_ptr<HttpConnection>& connection, OwnedCall& call) {
  if (!options.gateway_inline || call.gateway == nullptr) return false;
  const std::string_view path = std::string_view(call.target).substr(0, call.target.find('?'));
  if (!gateway::is_gateway_path(path)) return false;
  ++in_flight;
  ++fibers;
  const net::any_io_executor strand = connection->executor();
  Fiber::start(strand, [this, connection = std::move(connection), call = std::move(call)]() mutable {
    // A streamed gateway call may begin its answer while it waits for the upstream (HttpCall::begin_answer,
    // gateway/stream_keepalive.h): the head goes out now, on this strand (the fiber runs on it), and the
    // pieces through the pipe as submit()'s producers send theirs.
    // (Two references: the function holds them in place, no allocation per call.)
    std::shared_ptr<BodyPipe> pipe;
    const AnswerStarter begin_answer = [&pipe, &connection](std::string_view content_type) {
      pipe = std::make_shared<BodyPipe>();
      connection->on_handled(HttpAnswer{200, std::string(content_type), std::string(), 0}, pipe);
      return BodyWriter([pipe = pipe, connection = connection](std::string_view piece) {
        if (pipe->gone()) return false;
        if (!piece.empty() && pipe->put(piece)) wake_to_pump(connection);
        return true;
      });
    };
    std::optional<HttpAnswer> handled = handle(call, &begin_answer);
    if (handled && handled->stream) {  // not expected here (the gateway does not stream): its whole body
      handled->stream([&](std::string_view piece) {
        handled->body += piece;
        return true;
      });
      handled->stream = nullptr;
    }
    if (pipe) {  // begun: the rest of the body, then its end
      if (handled && !handled->body.empty() && pipe->put(handled->body)) wake_to_pump(connection);
      handled_one();
      if (pipe->end(handled.has_value())) wake_to_pump(connection);
      --fibers;
      return;
    }
    handled_one();
    if (handled) {
      net::dispatch(connection->executor(), [connection, handled = std::move(*handled)]() mutable {
        connection->on_handled(std::move(handled));
      });
    }
    --fibers;
  });
  return true;
}

void HttpServer::Impl::cancel_upstream() {
  if (options.gateway != nullptr) options.gateway->cancel_upstream();
}

void HttpServer::Impl::run_on_pool(std::function<void()> work) {
  ++in_flight;
  pool.post([this, work = std::move(work), guard = net::make_work_guard(ioc)] {
    if (!deadline_passed) work();
    if (--in_flight == 0 && draining) net::post(strand, [this] { maybe_finish_drain(); });
  });
}

std::vector<std::shared_ptr<HttpConnection>> HttpServer::Impl::live() {
  std::vector<std::shared_ptr<HttpConnection>> out;
  std::lock_guard lock(mutex);
  for (auto& [id, weak] : connections) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

void HttpServer::Impl::accept() {
  net::io_context& loop = loop_for_connection();
  acceptor.async_accept(net::make_strand(loop), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || draining) return;
    if (ec) {  // e.g. out of file descriptors: try again shortly instead of spinning
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e && !draining) accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    size_t open = 0;
    {
      std::lock_guard lock(mutex);
      open = connections.size();
    }
    if (open >= options.max_connections) {
      refuse_connection(std::move(socket));
    } else {
      std::make_shared<HttpConnection>(std::move(socket), *this, ++next_connection_id)->start();
    }
    accept();
  });
}

void HttpServer::Impl::refuse_connection(tcp::socket socket) {
  if (refusing.load() >= kMaxRefusing) {
    beast::error_code ignored;
    socket.close(ignored);
    return;
  }
  const HttpAnswer a =
      error_answer(503, "too_many_connections",
                   "the server has its maximum of " + std::to_string(options.max_connections) +
                       " open connections (--max-connections); retry later",
                   "");
  std::string response =
      "HTTP/1.1 503 Service Unavailable\r\nServer: crl/" CRL_VERSION "\r\nContent-Type: " + a.content_type +
      "\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " + std::to_string(a.body.size()) +
      "\r\n\r\n" + a.body;
  std::make_shared<ConnectionRefusal>(std::move(socket), std::move(response), refusing, kRefusalLinger)
      ->start();
}

void HttpServer::Impl::schedule_reap() {
  const double interval = std::clamp(service.options().idle_timeout_s / 4.0, 0.02, 5.0);
  reaper.expires_after(to_duration(interval));
  reaper.async_wait([this](beast::error_code ec) {
    if (ec || draining) return;
    // Destroying an episode may run environment code (a sandbox's teardown): on the pool, one reap at a time.
    if (!reaping.exchange(true)) {
      pool.post([this] {
        service.reap_idle();
        if (options.gateway != nullptr) options.gateway->reap_idle();  // gateway sessions, same timeout
        reaping = false;
      });
    }
    schedule_reap();
  });
}

void HttpServer::Impl::schedule_sweep() {
  const double interval = std::clamp(options.request_timeout_s / 8.0, 0.005, 0.5);
  sweeper.expires_after(to_duration(interval));
  sweeper.async_wait([this](beast::error_code ec) {
    if (ec == net::error::operation_aborted) return;
    const auto now = Clock::now();
    for (auto& c : live()) net::post(c->executor(), [c, now] { c->check_deadline(now); });
    schedule_sweep();
  });
}

void HttpServer::Impl::begin_drain() {
  if (draining.exchange(true)) return;
  beast::error_code ignored;
  acceptor.close(ignored);
  signals.cancel(ignored);
  reaper.cancel();
  accept_retry.cancel();
  drain_deadline.expires_after(to_duration(options.drain_timeout_s));
  drain_deadline.async_wait([this](beast::error_code ec) {
    if (!ec) on_drain_deadline();
  });
  for (auto& c : live()) net::post(c->executor(), [c] { c->drain(); });
  maybe_finish_drain();
}

void HttpServer::Impl::on_drain_deadline() {
  deadline_passed = true;
  cancel_upstream();
  for (auto& c : live()) net::post(c->executor(), [c] { c->drain_deadline(); });
  deadline_grace.expires_after(kDeadlineGrace);
  deadline_grace.async_wait([this](beast::error_code ec) {
    if (!ec) stop_loops();  // answers not written by now are dropped with their connections
  });
  maybe_finish_drain();
}

void HttpServer::Impl::maybe_finish_drain() {
  if (!draining) return;
  {
    std::lock_guard lock(mutex);
    if (!connections.empty()) return;
  }
  if (in_flight > 0 && !deadline_passed) return;  // a handler whose client left may still finish in time
  drain_deadline.cancel();
  deadline_grace.cancel();
  sweeper.cancel();
  stop_loops();
}

HttpServer::HttpServer(HttpOptions options, EpisodeService& service)
    : impl_(std::make_shared<Impl>(std::move(options), service)) {
  Impl& s = *impl_;
  beast::error_code ec;
  const std::string host = s.options.host == "localhost" ? "127.0.0.1" : s.options.host;
  const auto address = net::ip::make_address(host, ec);
  if (ec) throw Error("option --host", "host", "value \"" + s.options.host + "\" is not an IP address");
  const tcp::endpoint endpoint(address, s.options.port);
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    throw Error("option --host/--port", "port",
                "cannot listen on " + host + ":" + std::to_string(s.options.port) + ": " + ec.message());
  }
  s.port = s.acceptor.local_endpoint().port();
  if (s.options.handle_signals) {
    // Installed now, before anyone learns the port, so that an early SIGTERM drains instead of killing.
    s.signals.add(SIGTERM);
    s.signals.add(SIGINT);
    s.signals.async_wait([&s](beast::error_code e, int) {
      if (!e) s.begin_drain();
    });
  }
  s.metrics_token = s.service.metrics().set_transport([this] {
    const Stats now = stats();
    return TransportLoad{now.connections, now.handling, now.worker_threads, now.queued};
  });
}

HttpServer::~HttpServer() {
  impl_->service.metrics().clear_transport(impl_->metrics_token);
}

uint16_t HttpServer::port() const {
  return impl_->port;
}

bool HttpServer::draining() const {
  return impl_->draining;
}

HttpServer::Stats HttpServer::stats() const {
  Stats out;
  {
    std::lock_guard lock(impl_->mutex);
    out.connections = impl_->connections.size();
  }
  out.reading = impl_->reading;
  out.handling = impl_->in_flight;
  const WorkerPool::Stats pool = impl_->pool.stats();
  out.worker_threads = pool.threads;
  out.queued = pool.queued;
  return out;
}

size_t HttpServer::unfinished() const {
  return impl_->in_flight;
}

void HttpServer::request_stop() {
  // A raw pointer: a handler left in the io_context when it stops is destroyed with it, inside ~Impl.
  Impl* impl = impl_.get();
  net::post(impl->strand, [impl] { impl->begin_drain(); });
}

void HttpServer::run() {
  Impl& s = *impl_;
  net::post(s.strand, [&s] {
    if (s.draining) return;
    s.accept();
    s.schedule_reap();
    s.schedule_sweep();
  });
  std::vector<std::thread> io_threads;
  for (auto& loop : s.more) {
    io_threads.emplace_back([&loop = *loop] {
      name_this_thread("crl-io");
      // Kept running while it has no connection (it gets the next ones) until stop_loops().
      const auto busy = net::make_work_guard(loop);
      loop.run();
    });
  }
  s.ioc.run();
  for (auto& t : io_threads) t.join();
  // Gateway calls suspended on fibers when the loops stopped (past the drain deadline their upstream waits
  // were cancelled, so each is a handler away from its end): run them out, for at most the grace period,
  // rather than abandon their stacks.
  const auto grace_end = Clock::now() + kDeadlineGrace;
  if (s.fibers > 0) {
    s.ioc.restart();
    for (auto& loop : s.more) loop->restart();
  }
  while (s.fibers > 0 && Clock::now() < grace_end) {
    size_t ran = s.ioc.poll();
    for (auto& loop : s.more) ran += loop->poll();
    if (ran == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (s.options.gateway != nullptr) s.options.gateway->leave_io_context();
}

}  // namespace crl::server
