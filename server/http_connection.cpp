#include "server/http_connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/beast/websocket.hpp>
#include <cmath>

#include "server/gateway/gateway.h"
#include "server/openenv_session.h"
#include "server/response_head.h"
#include "server/router.h"
#include "server/ui_page.h"
#include "server/websocket_session.h"

namespace crl::server {

namespace websocket = beast::websocket;

bool BodyPipe::put(std::string_view piece) {
  std::lock_guard lock(mutex_);
  pending_.append(piece);
  if (woken_) return false;
  woken_ = true;
  return true;
}

bool BodyPipe::end(bool complete) {
  std::lock_guard lock(mutex_);
  ended_ = true;
  complete_ = complete;
  if (woken_) return false;
  woken_ = true;
  return true;
}

BodyPipe::Taken BodyPipe::take() {
  std::lock_guard lock(mutex_);
  woken_ = false;
  Taken taken;
  taken.bytes.swap(pending_);
  taken.ended = ended_;
  taken.complete = complete_;
  return taken;
}

namespace {

// The head fields every answer has (a streamed one adds Transfer-Encoding: chunked).
template <typename Body>
void set_head(http::response<Body>& response, const HttpAnswer& answer, bool keep_alive) {
  response.set(http::field::server, "crl/" CRL_VERSION);
  response.set(http::field::content_type, answer.content_type);
  // The one HTML answer is the viewer's page (GET /ui): it goes out with its Content-Security-Policy.
  if (answer.content_type.rfind("text/html", 0) == 0)
    response.set("Content-Security-Policy", ui_page_policy());
  if (answer.retry_after > 0) {
    response.set(http::field::retry_after, std::to_string(static_cast<int>(std::ceil(answer.retry_after))));
  }
  response.keep_alive(keep_alive);
}

// What one non-blocking gather send takes of `buffers` now (0 when the socket is full or failed: the
// asynchronous write that follows meets the same error and reports it).
size_t send_now(int socket, const std::array<net::const_buffer, 2>& buffers) {
  std::array<iovec, 2> parts{};
  for (size_t i = 0; i < buffers.size(); ++i) {
    parts[i].iov_base = const_cast<void*>(buffers[i].data());
    parts[i].iov_len = buffers[i].size();
  }
  msghdr message{};
  message.msg_iov = parts.data();
  message.msg_iovlen = parts.size();
  const ssize_t sent = ::sendmsg(socket, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
  return sent > 0 ? static_cast<size_t>(sent) : 0;
}

}  // namespace

HttpConnection::HttpConnection(tcp::socket&& socket, HttpServer::Impl& server, uint64_t id)
    : stream_(std::move(socket)), server_(server), id_(id) {}

HttpConnection::~HttpConnection() {
  set_reading(false);
  server_.remove(id_);
}

void HttpConnection::start() {
  server_.add(id_, weak_from_this());
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
}

void HttpConnection::check_deadline(Clock::time_point now) {
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

void HttpConnection::drain() {
  if (phase_ == Phase::kUpgraded) {
    if (const auto session = ws_.lock()) session->close(websocket::close_code::going_away);
    return;
  }
  if (busy_ || request_started()) return;
  close();
}

void HttpConnection::drain_deadline() {
  if (phase_ == Phase::kUpgraded) return close();
  if (pipe_) return close();  // a streamed answer is cut: its head is out, no 503 can follow
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

void HttpConnection::on_handled(HttpAnswer handled, std::shared_ptr<BodyPipe> pipe) {
  if (phase_ != Phase::kWorking) {  // answered at the drain deadline already
    if (pipe) pipe->close();
    return;
  }
  // Past the drain deadline a request still being handled gets the deadline's 503 whichever comes first,
  // its handler's answer or drain_deadline(): the gateway's upstream calls are cancelled at the deadline,
  // so their (cancelled) answers can now arrive before it.
  if (server_.deadline_passed) {
    if (pipe) pipe->close();
    return drain_deadline();
  }
  if (pipe) return answer_streamed(std::move(handled), std::move(pipe));
  answer(std::move(handled), keep_alive_);
}

void HttpConnection::answer_streamed(HttpAnswer answer, std::shared_ptr<BodyPipe> pipe) {
  busy_ = true;
  pipe_ = std::move(pipe);
  if (parser_->get().version() == 10) {  // no chunked coding in HTTP/1.0: the whole body at its end
    answer.stream = nullptr;
    collected_ = std::move(answer);
    phase_ = Phase::kStreaming;
    return pump();
  }
  server_.service.metrics().count_response(answer.status);
  stream_head_.emplace(static_cast<http::status>(answer.status), 11);
  set_head(*stream_head_, answer, keep_alive_ && !server_.draining);
  stream_head_->chunked(true);
  stream_head_writer_.emplace(*stream_head_);
  chunk_in_flight_ = true;
  last_chunk_sent_ = false;
  deadline_ = Clock::now() + to_duration(server_.options.request_timeout_s);
  phase_ = Phase::kWriting;
  http::async_write_header(
      stream_, *stream_head_writer_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_stream_write(ec); });
}

void HttpConnection::pump() {
  if (!pipe_ || chunk_in_flight_ || last_chunk_sent_) return;
  BodyPipe::Taken taken = pipe_->take();
  if (collected_) {
    collected_->body += taken.bytes;
    if (!taken.ended) return;
    if (!taken.complete) return close();
    HttpAnswer whole = std::move(*collected_);
    collected_.reset();
    pipe_.reset();
    return answer(std::move(whole), keep_alive_);
  }
  const auto write = [this](const auto& buffers) {
    chunk_in_flight_ = true;
    deadline_ = Clock::now() + to_duration(server_.options.request_timeout_s);
    phase_ = Phase::kWriting;
    net::async_write(stream_, buffers, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_stream_write(ec);
    });
  };
  if (!taken.bytes.empty()) {  // never an empty chunk: that would be the last one
    chunk_ = std::move(taken.bytes);
    return write(http::make_chunk(net::buffer(chunk_)));
  }
  if (taken.ended) {
    if (!taken.complete) return close();  // the producer failed: no last chunk, the client sees a cut body
    last_chunk_sent_ = true;
    return write(http::make_chunk_last());
  }
  phase_ = Phase::kStreaming;  // waits for the producer (woken by its next piece)
}

void HttpConnection::on_stream_write(beast::error_code ec) {
  chunk_in_flight_ = false;
  if (ec) return close();  // the client went away (or did not read within the deadline)
  if (!last_chunk_sent_) return pump();
  busy_ = false;
  phase_ = Phase::kIdle;
  const bool keep = stream_head_->keep_alive();
  stream_head_writer_.reset();
  stream_head_.reset();
  pipe_.reset();
  chunk_.clear();
  last_chunk_sent_ = false;
  if (!keep) return close();
  read();
}

void HttpConnection::set_reading(bool on) {
  if (on == reading_) return;
  reading_ = on;
  if (on) {
    ++server_.reading;
  } else {
    --server_.reading;
  }
}

void HttpConnection::read() {
  if (server_.draining) return close();
  parser_.emplace();
  configure_parser(*parser_, server_.options.max_body_bytes);
  scanner_ = HeadScanner{};
  refused_ = false;
  accept_.clear();
  deadline_ = Clock::now() + to_duration(server_.options.request_timeout_s);
  phase_ = Phase::kReading;
  scan_head();
}

void HttpConnection::scan_head() {
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
  // As much as the buffer holds (kReadBufferLimit, 32 KB): a request whose head and body fit arrives in one
  // read, where reads of 8 KB took two for a gateway call's 9 KB; and since Beast reads a body only into the
  // buffer's free capacity, the body's reads are as large (a 100 KB body: four reads, not thirteen). A
  // connection keeps that buffer between requests.
  stream_.socket().async_read_some(buffer_.prepare(buffer_.max_size() - buffer_.size()),
                                   [self = shared_from_this()](beast::error_code ec, size_t n) {
                                     self->buffer_.commit(n);
                                     if (ec && n == 0) return self->on_read(ec);
                                     self->scan_head();
                                   });
}

void HttpConnection::on_head(std::string_view bytes) {
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
        error_answer(417, "expectation_failed",
                     "the only Expect this server meets is 100-continue, not \"" + std::string(expect) + "\"",
                     ""),
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

void HttpConnection::read_body() {
  // Most bodies arrive in the head's read: parsing what the buffer holds here spares the loop round that
  // Beast's async_read takes even when it has nothing to read (its completion is always posted).
  beast::error_code ec;
  const auto data = buffer_.data();
  buffer_.consume(put_buffered(*parser_, {static_cast<const char*>(data.data()), data.size()}, ec));
  if (ec || parser_->is_done()) return on_read(ec);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
}

void HttpConnection::on_read(beast::error_code ec) {
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

void HttpConnection::dispatch() {
  busy_ = true;
  set_reading(false);
  auto& request = parser_->get();
  if (request.method() == http::verb::get &&
      request.target().substr(0, request.target().find('?')) == "/ws" && websocket::is_upgrade(request)) {
    return upgrade();
  }
  OwnedCall call{std::string(request.method_string()), std::string(request.target()), content_type_, accept_,
                 std::move(request.body())};
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

void HttpConnection::refuse(const HttpRefusal& r) {
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

void HttpConnection::answer(HttpAnswer answer, bool keep_alive) {
  busy_ = true;
  server_.service.metrics().count_response(answer.status);
  const unsigned version = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
  response_.emplace(static_cast<http::status>(answer.status), version == 10 ? 10 : 11);
  set_head(*response_, answer, keep_alive && !server_.draining);
  response_->body() = std::move(answer.body);
  response_->prepare_payload();
  deadline_ = Clock::now() + to_duration(server_.options.request_timeout_s);
  phase_ = Phase::kWriting;
  // Head and body in one gather write (Beast's serializer of the message cost as much as a tenth of a
  // gateway call; the head's bytes are the same: server/response_head.h).
  write_response_head(*response_, response_head_);
  std::array<net::const_buffer, 2> buffers{net::buffer(response_head_), net::buffer(response_->body())};
  // Sent here when the socket takes it all (an answer of a few KB almost always fits): Asio posts the
  // completion of a write that succeeded at once, a loop round per call for nothing. A pipelined request
  // already buffered still waits for that round, so that answering it never recurses into this one.
  const size_t sent = send_now(stream_.socket().native_handle(), buffers);
  if (sent == buffers[0].size() + buffers[1].size() && buffer_.size() == 0) return on_write({});
  if (sent >= buffers[0].size()) {
    buffers[1] += sent - buffers[0].size();
    buffers[0] = {};
  } else {
    buffers[0] += sent;
  }
  net::async_write(stream_, buffers,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
}

void HttpConnection::on_write(beast::error_code ec) {
  busy_ = false;
  phase_ = Phase::kIdle;
  const bool keep = response_->keep_alive();
  response_.reset();
  if (ec) return close();
  if (!keep) return refused_ ? linger() : close();
  read();
}

void HttpConnection::linger() {
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

void HttpConnection::upgrade() {
  phase_ = Phase::kUpgraded;
  WebSocketHost host;
  host.run_on_pool = [&server = server_](std::function<void()> work) { server.run_on_pool(std::move(work)); };
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

void HttpConnection::close() {
  if (pipe_) {
    pipe_->close();
    pipe_.reset();
  }
  beast::error_code ignored;
  phase_ = Phase::kClosed;
  set_reading(false);
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.close();
  server_.remove(id_);
}

}  // namespace crl::server
