#pragma once
// One client connection of the HTTP transport (private to server/http_server.cpp): reads a request (head
// checked by our own scanner, body by Beast's parser under the body limit), hands it to a handler, writes
// the answer, repeats while the client keeps the connection alive; deadlines, refusals with a lingering
// close, the drain, and the upgrade to OpenEnv's WebSocket session. A body that came in the head's read is
// parsed in place and an answer the socket takes whole goes on to the next read at once: Asio and Beast post
// every completion, and each post is one more round of the event loop (an epoll_wait) per request.
#include <atomic>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_request.h"
#include "server/http_server_impl.h"

namespace crl::server {

class WebSocketSession;

// A streamed body (HttpAnswer::stream) between its producer, on a worker, and its connection's strand: the
// producer puts pieces, the connection takes what has piled up whenever it is free to write.
class BodyPipe {
 public:
  // Producer side. put() returns true when the connection must be woken (no wake-up is pending).
  bool put(std::string_view piece);
  bool end(bool complete);  // no more pieces (complete false: the producer failed); true: wake it
  bool gone() const { return gone_; }

  // Connection side (its strand).
  struct Taken {
    std::string bytes;
    bool ended = false, complete = true;
  };
  Taken take();
  void close() { gone_ = true; }  // the client can no longer receive it: the producer stops

 private:
  std::mutex mutex_;
  std::string pending_;
  bool ended_ = false, complete_ = true, woken_ = false;
  std::atomic<bool> gone_{false};
};

// One client connection: read a request, answer it, repeat (keep-alive), on the connection's strand.
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(tcp::socket&& socket, HttpServer::Impl& server, uint64_t id);
  ~HttpConnection();  // unregisters from the server (idempotent with close())

  void start();

  // The connection's strand, on the event loop (one I/O thread's) its socket belongs to.
  net::any_io_executor executor() { return stream_.get_executor(); }

  // Called by the server's sweeper (on this strand): a read or write past its deadline is cancelled. One
  // coarse sweep replaces a timer per request, whose arming and cancelling cost system calls on every step.
  void check_deadline(Clock::time_point now);

  // The server drains: close at once if no request is under way; otherwise the answer closes it.
  void drain();

  // The drain deadline passed: a request still being handled is answered 503 now (its handler's answer, if
  // it ever comes, is dropped); one still being read is cut off.
  void drain_deadline();

  // The worker pool's answer (on this strand); `pipe`: the rest of its body, when it streams.
  void on_handled(HttpAnswer handled, std::shared_ptr<BodyPipe> pipe = nullptr);

  // A streamed body has more to send, or has ended (on this strand).
  void pump();

 private:
  void set_reading(bool on);

  bool request_started() const { return buffer_.size() > 0 || (parser_ && parser_->got_some()); }

  void read();

  // The head is read and checked by our own scanner (server/http_request.h) before Beast's parser sees it.
  void scan_head();

  void on_head(std::string_view bytes);

  void read_body();

  void on_read(beast::error_code ec);

  void dispatch();

  void refuse(const HttpRefusal& r);

  void answer(HttpAnswer answer, bool keep_alive);

  void on_write(beast::error_code ec);

  // A streamed answer: the head now, then the pipe's pieces as chunks (HTTP/1.0: the whole body at its end).
  void answer_streamed(HttpAnswer answer, std::shared_ptr<BodyPipe> pipe);

  void on_stream_write(beast::error_code ec);

  // After a refusal the client may still be sending the rest of its request: closing with unread bytes would
  // reset the connection, and the reset can destroy the answer before the client reads it. So: half-close,
  // read and drop what still comes, close at its end or after kRefusalLinger (RFC 9112 section 9.6).
  void linger();

  // OpenEnv's WebSocket session (server/websocket_session.h). The session keeps this connection (its stream's
  // owner) alive while it runs and closes it when it ends; the connection only knows it weakly (no cycle).
  void upgrade();

  void close();

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  const uint64_t id_;
  beast::flat_buffer buffer_{kReadBufferLimit};
  HeadScanner scanner_;
  std::optional<RequestParser> parser_;
  std::optional<http::response<http::string_body>> response_;
  std::string response_head_;  // response_'s head as text (server/response_head.h), written with its body
  // A streamed answer under way: its pipe, head, the chunk being written and, for HTTP/1.0, the answer
  // collected until its end.
  std::shared_ptr<BodyPipe> pipe_;
  std::optional<http::response<http::empty_body>> stream_head_;
  std::optional<http::response_serializer<http::empty_body>> stream_head_writer_;
  std::string chunk_;
  std::optional<HttpAnswer> collected_;
  bool chunk_in_flight_ = false, last_chunk_sent_ = false;
  std::string accept_, content_type_;
  bool keep_alive_ = false;
  // kStreaming: a streamed answer waits for its producer's next piece (no deadline; writes have one).
  enum class Phase { kIdle, kReading, kWorking, kWriting, kStreaming, kLingering, kUpgraded, kClosed };
  std::weak_ptr<WebSocketSession> ws_;  // OpenEnv's WebSocket session, once upgraded
  Phase phase_ = Phase::kIdle;
  Clock::time_point deadline_;
  bool busy_ = false;
  bool timed_out_ = false;
  bool reading_ = false;
  bool refused_ = false;  // the answer under way refuses the request: linger before closing
};

}  // namespace crl::server
