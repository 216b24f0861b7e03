#include "server/http_server.h"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cmath>
#include <csignal>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "server/router.h"
#include "server/ui_page.h"

namespace crl::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {
std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}
constexpr uint32_t kHeaderLimit = 16 * 1024;
std::string_view view(beast::string_view s) {
  return {s.data(), s.size()};
}
class Connection;
using Clock = std::chrono::steady_clock;
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
        accept_retry(strand),
        sweeper(strand) {}

  void accept();
  void schedule_reap();
  void schedule_sweep();
  void begin_drain();  // on `strand`
  void add(uint64_t id, std::weak_ptr<Connection> connection) {
    std::lock_guard lock(mutex);
    connections.emplace(id, std::move(connection));
  }
  ~Impl() { stopped = true; }
  void remove(uint64_t id) {
    std::lock_guard lock(mutex);
    connections.erase(id);
    if (draining && connections.empty() && !stopped) {
      net::post(strand, [this] {
        drain_deadline.cancel();
        sweeper.cancel();
      });
    }
  }

  HttpOptions options;
  EpisodeService& service;
  // Declared before the io_context: its destruction destroys pending handlers, hence connections, which
  // unregister here.
  std::mutex mutex;
  std::map<uint64_t, std::weak_ptr<Connection>> connections;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
  net::io_context ioc;
  net::strand<net::io_context::executor_type> strand;  // the acceptor, signals and timers
  tcp::acceptor acceptor;
  net::signal_set signals;
  net::steady_timer reaper;
  net::steady_timer drain_deadline;
  net::steady_timer accept_retry;
  net::steady_timer sweeper;  // request deadlines, checked a few times per timeout
  uint64_t next_connection_id = 0;
  uint16_t port = 0;
};

namespace {

// One client connection: read a request, answer it, repeat (keep-alive), on the connection's strand.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket&& socket, HttpServer::Impl& server, uint64_t id)
      : stream_(std::move(socket)), server_(server), id_(id) {}
  ~Connection() { server_.remove(id_); }

  void start() {
    server_.add(id_, weak_from_this());
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

  // Called by the server's sweeper (on this strand): a read or write past its deadline is cancelled. One
  // coarse sweep replaces a timer per request, whose arming and cancelling cost system calls on every step.
  void check_deadline(Clock::time_point now) {
    if (phase_ == Phase::kIdle || now < deadline_) return;
    beast::error_code ignored;
    if (phase_ == Phase::kReading) {
      timed_out_ = true;
      stream_.socket().cancel(ignored);
    } else {  // a client that does not read its answer
      stream_.socket().close(ignored);
    }
  }

  // The server drains: close at once if no request is under way; otherwise the answer closes it.
  void drain() {
    if (busy_ || (parser_ && parser_->got_some())) return;
    close();
  }

 private:
  void read() {
    if (server_.draining) return close();
    parser_.emplace();
    parser_->body_limit(server_.options.max_body_bytes);
    parser_->header_limit(kHeaderLimit);
    deadline_ = Clock::now() + seconds(server_.options.request_timeout_s);
    phase_ = Phase::kReading;
    // The header first: a client that sends `Expect: 100-continue` (curl does for large bodies) waits for
    // our go-ahead before it sends the body, so the body cannot be read in the same call.
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read(ec);
    const beast::string_view expect = parser_->get()[http::field::expect];
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
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    phase_ = Phase::kIdle;
    if (timed_out_ && ec) {
      timed_out_ = false;
      if (parser_->got_some()) {
        return answer(error_answer(408, "request_timeout",
                                   "the request did not arrive completely within " +
                                       std::to_string(server_.options.request_timeout_s) + " s",
                                   ""),
                      false);
      }
      return close();
    }
    timed_out_ = false;
    if (ec == http::error::end_of_stream)
      return close();  // the client closed (or half-closed) between requests
    if (ec == http::error::body_limit) {
      return answer(error_answer(413, "payload_too_large",
                                 "the body is over the limit of " +
                                     std::to_string(server_.options.max_body_bytes) + " bytes",
                                 ""),
                    false);
    }
    if (ec == http::error::header_limit) {
      return answer(
          error_answer(431, "headers_too_large",
                       "the headers are over the limit of " + std::to_string(kHeaderLimit) + " bytes", ""),
          false);
    }
    if (ec == http::error::partial_message) {
      return answer(error_answer(400, "incomplete_request", "the connection ended inside a request", ""),
                    false);
    }
    if (ec && ec.category() == http::make_error_code(http::error::bad_method).category()) {
      return answer(error_answer(400, "bad_http", "the request is not valid HTTP/1.1: " + ec.message(), ""),
                    false);
    }
    if (ec) return close();  // reset, aborted: nobody to answer

    busy_ = true;
    const auto& request = parser_->get();
    HttpCall call;
    call.method = view(request.method_string());
    call.target = view(request.target());
    call.content_type = view(request[http::field::content_type]);
    call.accept = view(request[http::field::accept]);
    call.body = request.body();
    call.draining = server_.draining;
    answer(route(server_.service, call), request.keep_alive());
  }

  void answer(HttpAnswer answer, bool keep_alive) {
    busy_ = true;
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
    if (ec || !keep) return close();
    read();
  }

  void close() {
    beast::error_code ignored;
    phase_ = Phase::kIdle;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  const uint64_t id_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
  enum class Phase { kIdle, kReading, kWriting };
  Phase phase_ = Phase::kIdle;
  Clock::time_point deadline_;
  bool busy_ = false;
  bool timed_out_ = false;
};

}  // namespace

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
    std::make_shared<Connection>(std::move(socket), *this, ++next_connection_id)->start();
    accept();
  });
}

void HttpServer::Impl::schedule_reap() {
  const double interval = std::clamp(service.options().idle_timeout_s / 4.0, 0.02, 5.0);
  reaper.expires_after(seconds(interval));
  reaper.async_wait([this](beast::error_code ec) {
    if (ec || draining) return;
    service.reap_idle();
    schedule_reap();
  });
}

void HttpServer::Impl::schedule_sweep() {
  const double interval = std::clamp(options.request_timeout_s / 8.0, 0.005, 0.5);
  sweeper.expires_after(seconds(interval));
  sweeper.async_wait([this](beast::error_code ec) {
    if (ec == net::error::operation_aborted) return;
    std::vector<std::shared_ptr<Connection>> live;
    {
      std::lock_guard lock(mutex);
      for (auto& [id, weak] : connections) {
        if (auto c = weak.lock()) live.push_back(std::move(c));
      }
    }
    const auto now = Clock::now();
    for (auto& c : live) net::post(c->executor(), [c, now] { c->check_deadline(now); });
    if (!(draining && live.empty())) schedule_sweep();
  });
}

void HttpServer::Impl::begin_drain() {
  if (draining.exchange(true)) return;
  beast::error_code ignored;
  acceptor.close(ignored);
  signals.cancel(ignored);
  reaper.cancel();
  accept_retry.cancel();
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard lock(mutex);
    for (auto& [id, weak] : connections) {
      if (auto c = weak.lock()) live.push_back(std::move(c));
    }
  }
  if (live.empty()) {
    sweeper.cancel();
    return;
  }
  drain_deadline.expires_after(seconds(options.drain_timeout_s));
  drain_deadline.async_wait([this](beast::error_code ec) {
    if (!ec) ioc.stop();  // connections that did not finish in time are dropped
  });
  for (auto& c : live) {
    net::post(c->executor(), [c] { c->drain(); });
  }
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

void HttpServer::request_stop() {
  auto impl = impl_;
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
  std::vector<std::thread> workers;
  for (int i = 1; i < s.options.threads; ++i) workers.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (auto& w : workers) w.join();
}

}  // namespace crl::server
