#include "server/http_server.h"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/defer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <cmath>
#include <csignal>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "server/connection_refusal.h"
#include "server/gateway/gateway.h"
#include "server/http_request.h"
#include "server/openenv_session.h"
#include "server/router.h"
#include "server/ui_page.h"
#include "server/websocket_session.h"

namespace crl::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {
std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}
// After the drain deadline, the time given to write the 503 answers before run() returns.
constexpr auto kDeadlineGrace = std::chrono::seconds(1);
// A refused request or connection (server/connection_refusal.h): its input is read and dropped after the
// answer for at most this long.
constexpr auto kRefusalLinger = std::chrono::seconds(1);
// Refused connections lingering at once at most; beyond, they are closed without an answer.
constexpr int kMaxRefusing = 64;
class Connection;
using Clock = std::chrono::steady_clock;

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
}  // namespace

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
        pool(static_cast<size_t>(std::max(1, options.workers))) {}

  void accept();
  void refuse_connection(tcp::socket socket);
  void schedule_reap();
  void schedule_sweep();
  void begin_drain();         // on `strand`
  void on_drain_deadline();   // on `strand`
  void maybe_finish_drain();  // on `strand`
  void submit(std::shared_ptr<Connection> connection, OwnedCall call);
  // A gateway call answered on the I/O thread that read it (HttpOptions::gateway_inline): true when it was
  // taken (fewer than threads - 1 such calls were running), false to submit() it instead.
  bool try_inline(std::shared_ptr<Connection>& connection, OwnedCall& call);
  // The handler of a routed request (routes, then route()), counted out of in_flight; nullopt when the drain
  // deadline had passed before it started.
  std::optional<HttpAnswer> handle(const OwnedCall& call);
  // The drain deadline passed: in-flight upstream calls of the gateway are cancelled, so that a call blocked
  // on a silent LLM returns (its connection has had its 503) and run() is not held by an I/O thread.
  void cancel_upstream();
  // Runs `work` on the worker pool, counted in in_flight like a routed request (the drain waits for it);
  // not run at all once the drain deadline has passed.
  void run_on_pool(std::function<void()> work);
  std::vector<std::shared_ptr<Connection>> live();
  void add(uint64_t id, std::weak_ptr<Connection> connection) {
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
  std::map<uint64_t, std::weak_ptr<Connection>> connections;  // open connections (closed ones leave)
  std::atomic<bool> draining{false};
  std::atomic<bool> deadline_passed{false};
  std::atomic<bool> stopped{false};
  std::atomic<bool> reaping{false};
  std::atomic<size_t> in_flight{0};  // requests handed to the pool whose handler has not returned
  std::atomic<int> refusing{0};
  std::atomic<int> inline_calls{0};  // gateway calls running on an I/O thread (try_inline)
  std::atomic<size_t> reading{0};    // connections with part of a request received
  net::io_context ioc;
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
  net::thread_pool pool;
  uint64_t next_connection_id = 0;
  uint16_t port = 0;
};

namespace {

// One client connection: read a request, answer it, repeat (keep-alive), on the connection's strand.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket&& socket, HttpServer::Impl& server, uint64_t id)
      : stream_(std::move(socket)), server_(server), id_(id) {}
  ~Connection() {
    set_reading(false);
    server_.remove(id_);
  }

  void start() {
    server_.add(id_, weak_from_this());
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

  // Called by the server's sweeper (on this strand): a read or write past its deadline is cancelled. One
  // coarse sweep replaces a timer per request, whose arming and cancelling cost system calls on every step.
  void check_deadline(Clock::time_point now) {
    if ((phase_ != Phase::kReading && phase_ != Phase::kWriting && phase_ != Phase::kLingering) ||
        now < deadline_) {
      return;
    }
    beast::error_code ignored;
    if (phase_ == Phase::kReading) {
      timed_out_ = true;
      stream_.socket().cancel(ignored);
    } else {  // a client that does not read its answer, or a refused one that keeps sending
      stream_.socket().close(ignored);
    }
  }

  // The server drains: close at once if no request is under way; otherwise the answer closes it.
  void drain() {
    if (phase_ == Phase::kUpgraded) {
      if (const auto session = ws_.lock()) session->close(websocket::close_code::going_away);
      return;
    }
    if (busy_ || request_started()) return;
    close();
  }

  // The drain deadline passed: a request still being handled is answered 503 now (its handler's answer, if
  // it ever comes, is dropped); one still being read is cut off.
  void drain_deadline() {
    if (phase_ == Phase::kUpgraded) return close();
    if (phase_ == Phase::kWorking) {
      return answer(error_answer(503, "drain_deadline",
                                 "the server shut down before this request finished (drain timeout of " +
                                     std::to_string(server_.options.drain_timeout_s) +
                                     " s); it may or may not have been applied",
                                 accept_),
                    false);
    }
    if (phase_ != Phase::kWriting) close();
  }

  // The worker pool's answer (on this strand).
  void on_handled(HttpAnswer handled) {
    if (phase_ != Phase::kWorking) return;  // answered at the drain deadline already
    // Past the drain deadline a request still being handled gets the deadline's 503 whichever comes first,
    // its handler's answer or drain_deadline(): the gateway's upstream calls are cancelled at the deadline,
    // so their (cancelled) answers can now arrive before it.
    if (server_.deadline_passed) return drain_deadline();
    answer(std::move(handled), keep_alive_);
  }

 private:
  void set_reading(bool on) {
    if (on == reading_) return;
    reading_ = on;
    if (on) {
      ++server_.reading;
    } else {
      --server_.reading;
    }
  }

  bool request_started() const { return buffer_.size() > 0 || (parser_ && parser_->got_some()); }

  void read() {
    if (server_.draining) return close();
    parser_.emplace();
    configure_parser(*parser_, server_.options.max_body_bytes);
    scanner_ = HeadScanner{};
    refused_ = false;
    accept_.clear();
    deadline_ = Clock::now() + seconds(server_.options.request_timeout_s);
    phase_ = Phase::kReading;
    scan_head();
  }

  // The head is read and checked by our own scanner (server/http_request.h) before Beast's parser sees it.
  void scan_head() {
    const auto data = buffer_.data();
    const std::string_view bytes(static_cast<const char*>(data.data()), data.size());
    if (!bytes.empty()) set_reading(true);
    switch (scanner_.scan(bytes)) {
      case HeadScanner::State::kComplete:
        return on_head(bytes);
      case HeadScanner::State::kRefused:
        return refuse(scanner_.refusal());
      case HeadScanner::State::kNeedMore:
        break;
    }
    stream_.socket().async_read_some(
        buffer_.prepare(std::min<size_t>(8192, buffer_.max_size() - buffer_.size())),
        [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->buffer_.commit(n);
          if (ec && n == 0) return self->on_read(ec);
          self->scan_head();
        });
  }

  void on_head(std::string_view bytes) {
    beast::error_code ec;
    const std::string_view head =
        bytes.substr(scanner_.head_begin(), scanner_.head_end() - scanner_.head_begin());
    const size_t used = parser_->put(net::buffer(head.data(), head.size()), ec);
    buffer_.consume(scanner_.head_end());
    if (ec || !parser_->is_header_done() || used != head.size()) {
      if (auto r = refusal_for(ec, server_.options.max_body_bytes)) return refuse(*r);
      return refuse({400, "bad_http", "the request head is not valid HTTP/1.1"});
    }
    const auto& request = parser_->get();
    accept_ = std::string(request[http::field::accept]);
    if (auto r = check_framing(*parser_)) return refuse(*r);
    // Taken from the head: trailer fields of a chunked body must not change them.
    content_type_ = std::string(request[http::field::content_type]);
    keep_alive_ = request.keep_alive();
    const beast::string_view expect = request[http::field::expect];
    if (expect.empty()) return read_body();
    if (!beast::iequals(expect, "100-continue")) {
      return answer(
          error_answer(
              417, "expectation_failed",
              "the only Expect this server meets is 100-continue, not \"" + std::string(expect) + "\"", ""),
          false);
    }
    // Refuse a body over the limit before the client sends it (RFC 9110 section 10.1.1).
    const auto length = parser_->content_length();
    if (length && *length > server_.options.max_body_bytes) return on_read(http::error::body_limit);
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](beast::error_code write_ec, size_t) {
                       if (write_ec) return self->close();
                       self->read_body();
                     });
  }

  void read_body() {
    if (parser_->is_done()) return on_read({});
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    phase_ = Phase::kIdle;
    if (timed_out_ && ec) {
      timed_out_ = false;
      if (request_started()) {
        return refuse({408, "request_timeout",
                       "the request did not arrive completely within " +
                           std::to_string(server_.options.request_timeout_s) + " s"});
      }
      return close();
    }
    timed_out_ = false;
    if (ec == net::error::eof || ec == http::error::end_of_stream) {
      // The client closed (or half-closed): between requests nobody is left to answer; inside a head, it
      // gets the answer for what it sent.
      if (buffer_.size() > 0 && !parser_->is_header_done()) {
        return refuse({400, "incomplete_request", "the connection ended inside a request"});
      }
      if (!parser_->is_header_done()) return close();
    }
    if (ec) {
      if (auto r = refusal_for(ec, server_.options.max_body_bytes)) return refuse(*r);
      return close();  // reset, aborted: nobody to answer
    }
    dispatch();
  }

  void dispatch() {
    busy_ = true;
    set_reading(false);
    auto& request = parser_->get();
    if (request.method() == http::verb::get &&
        request.target().substr(0, request.target().find('?')) == "/ws" && websocket::is_upgrade(request)) {
      return upgrade();
    }
    OwnedCall call{std::string(request.method_string()), std::string(request.target()), content_type_,
                   accept_, std::move(request.body())};
    if (server_.options.gateway != nullptr) {
      call.gateway = server_.options.gateway;
      call.authorization = std::string(request[http::field::authorization]);
      call.routing_key = std::string(request["X-SMG-Routing-Key"]);
      call.api_key = std::string(request["x-api-key"]);
    }
    const std::string_view path = std::string_view(call.target).substr(0, call.target.find('?'));
    if ((path == "/health" || path == "/metrics") && call.method == "GET") {
      // Never behind environment work: answered here, on the I/O thread (both read counters only).
      return answer(route(server_.service, call.view(server_.draining)), keep_alive_);
    }
    phase_ = Phase::kWorking;
    auto self = shared_from_this();
    if (server_.try_inline(self, call)) return;
    server_.submit(std::move(self), std::move(call));
  }

  void refuse(const HttpRefusal& r) {
    set_reading(false);
    refused_ = true;
    if (server_.options.gateway != nullptr && parser_) {  // the request line is parsed: its target is known
      // A harness's OpenAI/Anthropic client: the error in the gateway's shape (gateway.h gateway_refusal).
      const auto raw = parser_->get().target();
      const std::string_view target(raw.data(), raw.size());
      const std::string_view path = target.substr(0, target.find('?'));
      if (gateway::is_gateway_path(path))
        return answer(gateway::gateway_refusal(path, r.status, r.code, r.message), false);
    }
    answer(error_answer(r.status, r.code, r.message, accept_), false);
  }

  void answer(HttpAnswer answer, bool keep_alive) {
    busy_ = true;
    server_.service.metrics().count_response(answer.status);
    const unsigned version = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
    response_.emplace(static_cast<http::status>(answer.status), version == 10 ? 10 : 11);
    response_->set(http::field::server, "crl/" CRL_VERSION);
    response_->set(http::field::content_type, answer.content_type);
    // The one HTML answer is the viewer's page (GET /ui): it goes out with its Content-Security-Policy.
    if (answer.content_type.rfind("text/html", 0) == 0)
      response_->set("Content-Security-Policy", ui_page_policy());
    if (answer.retry_after > 0) {
      response_->set(http::field::retry_after,
                     std::to_string(static_cast<int>(std::ceil(answer.retry_after))));
    }
    response_->keep_alive(keep_alive && !server_.draining);
    response_->body() = std::move(answer.body);
    response_->prepare_payload();
    deadline_ = Clock::now() + seconds(server_.options.request_timeout_s);
    phase_ = Phase::kWriting;
    http::async_write(stream_, *response_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
  }

  void on_write(beast::error_code ec) {
    busy_ = false;
    phase_ = Phase::kIdle;
    const bool keep = response_->keep_alive();
    response_.reset();
    if (ec) return close();
    if (!keep) return refused_ ? linger() : close();
    read();
  }

  // After a refusal the client may still be sending the rest of its request: closing with unread bytes would
  // reset the connection, and the reset can destroy the answer before the client reads it. So: half-close,
  // read and drop what still comes, close at its end or after kRefusalLinger (RFC 9112 section 9.6).
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    phase_ = Phase::kLingering;
    deadline_ = Clock::now() + kRefusalLinger;
    buffer_.consume(buffer_.size());
    stream_.socket().async_read_some(buffer_.prepare(4096),
                                     [self = shared_from_this()](beast::error_code ec, size_t) {
                                       if (ec || self->phase_ != Phase::kLingering) return self->close();
                                       self->linger();
                                     });
  }

  // OpenEnv's WebSocket session (server/websocket_session.h). The session keeps this connection (its stream's
  // owner) alive while it runs and closes it when it ends; the connection only knows it weakly (no cycle).
  void upgrade() {
    phase_ = Phase::kUpgraded;
    WebSocketHost host;
    host.run_on_pool = [&server = server_](std::function<void()> work) {
      server.run_on_pool(std::move(work));
    };
    host.draining = [&server = server_] { return server.draining.load(); };
    host.finished = [this] { close(); };  // `owner` keeps this alive until the session is gone
    host.owner = shared_from_this();
    host.handshake_timeout_s = server_.options.request_timeout_s;
    host.idle_timeout_s = server_.service.options().idle_timeout_s;
    host.max_message_bytes = server_.options.max_body_bytes;
    auto session = std::make_shared<WebSocketSession>(
        stream_, std::make_unique<OpenEnvSession>(server_.service, server_.options.openenv_env),
        std::move(host));
    ws_ = session;
    session->accept(parser_->get());
  }

  void close() {
    beast::error_code ignored;
    phase_ = Phase::kClosed;
    set_reading(false);
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
    server_.remove(id_);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  const uint64_t id_;
  beast::flat_buffer buffer_{kReadBufferLimit};
  HeadScanner scanner_;
  std::optional<RequestParser> parser_;
  std::optional<http::response<http::string_body>> response_;
  std::string accept_, content_type_;
  bool keep_alive_ = false;
  enum class Phase { kIdle, kReading, kWorking, kWriting, kLingering, kUpgraded, kClosed };
  std::weak_ptr<WebSocketSession> ws_;  // OpenEnv's WebSocket session, once upgraded
  Phase phase_ = Phase::kIdle;
  Clock::time_point deadline_;
  bool busy_ = false;
  bool timed_out_ = false;
  bool reading_ = false;
  bool refused_ = false;  // the answer under way refuses the request: linger before closing
};

}  // namespace

std::optional<HttpAnswer> HttpServer::Impl::handle(const OwnedCall& call) {
  // Started after the drain deadline: its connection has had its 503 and the server is going away.
  std::optional<HttpAnswer> handled;
  if (!deadline_passed && options.routes) handled = options.routes(call.view(draining));
  if (!deadline_passed && !handled) handled = route(service, call.view(draining));
  // Counted out before the answer is posted: a client that has its answer sees the handler finished.
  if (--in_flight == 0 && draining) net::post(strand, [this] { maybe_finish_drain(); });
  return handled;
}

void HttpServer::Impl::submit(std::shared_ptr<Connection> connection, OwnedCall call) {
  ++in_flight;
  net::post(pool, [this, connection = std::move(connection), call = std::move(call),
                   guard = net::make_work_guard(ioc)]() mutable {
    std::optional<HttpAnswer> handled = handle(call);
    if (handled) {
      net::post(connection->executor(), [connection, handled = std::move(*handled)]() mutable {
        connection->on_handled(std::move(handled));
      });
    }
  });
}

// Why: a gateway call handed to the pool and back crosses two threads (I/O -> worker -> I/O), two scheduler
// wake-ups that cost more than the gateway's own work on a busy machine (issue 18's added latency). Here the
// call runs on the I/O thread that read it: deferred (asio's continuation queue of this thread, no wake-up)
// out of the connection's strand, so the strand stays free for the drain deadline's 503, and its answer is
// deferred back onto the strand the same way. The upstream call blocks this thread (on its own lane's
// io_context, never the server's), so at most threads - 1 calls run inline at once: one I/O thread is
// always left for /health, /metrics, accepting and the other connections; calls beyond go to the pool as
// before. Per-session ordering is the session's mutex either way.
bool HttpServer::Impl::try_inline(std::shared_ptr<Connection>& connection, OwnedCall& call) {
  if (!options.gateway_inline || call.gateway == nullptr || options.threads < 2) return false;
  const std::string_view path = std::string_view(call.target).substr(0, call.target.find('?'));
  if (!gateway::is_gateway_path(path)) return false;
  int running = inline_calls.load();
  do {
    if (running >= options.threads - 1) return false;
  } while (!inline_calls.compare_exchange_weak(running, running + 1));
  ++in_flight;
  net::defer(ioc, [this, connection = std::move(connection), call = std::move(call)]() mutable {
    std::optional<HttpAnswer> handled = handle(call);
    --inline_calls;
    if (handled) {
      net::defer(connection->executor(), [connection, handled = std::move(*handled)]() mutable {
        connection->on_handled(std::move(handled));
      });
    }
  });
  return true;
}

void HttpServer::Impl::cancel_upstream() {
  if (options.gateway != nullptr) options.gateway->cancel_upstream();
}

void HttpServer::Impl::run_on_pool(std::function<void()> work) {
  ++in_flight;
  net::post(pool, [this, work = std::move(work), guard = net::make_work_guard(ioc)] {
    if (!deadline_passed) work();
    if (--in_flight == 0 && draining) net::post(strand, [this] { maybe_finish_drain(); });
  });
}

std::vector<std::shared_ptr<Connection>> HttpServer::Impl::live() {
  std::vector<std::shared_ptr<Connection>> out;
  std::lock_guard lock(mutex);
  for (auto& [id, weak] : connections) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
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
      std::make_shared<Connection>(std::move(socket), *this, ++next_connection_id)->start();
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
  reaper.expires_after(seconds(interval));
  reaper.async_wait([this](beast::error_code ec) {
    if (ec || draining) return;
    // Destroying an episode may run environment code (a sandbox's teardown): on the pool, one reap at a time.
    if (!reaping.exchange(true)) {
      net::post(pool, [this] {
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
  sweeper.expires_after(seconds(interval));
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
  drain_deadline.expires_after(seconds(options.drain_timeout_s));
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
    if (!ec) ioc.stop();  // answers not written by now are dropped with their connections
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
  ioc.stop();
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
}

HttpServer::~HttpServer() = default;

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
  for (int i = 1; i < s.options.threads; ++i) io_threads.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (auto& t : io_threads) t.join();
}

}  // namespace crl::server
