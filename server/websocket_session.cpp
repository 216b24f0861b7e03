#include "server/websocket_session.h"

#include <boost/asio/post.hpp>
#include <chrono>

namespace crl::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;

namespace {
std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

WebSocketSession::WebSocketSession(beast::tcp_stream& stream, std::unique_ptr<OpenEnvSession> openenv,
                                   WebSocketHost host)
    : host_(std::move(host)), ws_(stream), openenv_(std::move(openenv)) {
  websocket::stream_base::timeout timeouts{};
  timeouts.handshake_timeout = seconds(host_.handshake_timeout_s);
  timeouts.idle_timeout = seconds(std::max(1.0, host_.idle_timeout_s));
  timeouts.keep_alive_pings = true;
  ws_.set_option(timeouts);
  ws_.set_option(websocket::stream_base::decorator(
      [](websocket::response_type& r) { r.set(http::field::server, "crl/" CRL_VERSION); }));
  ws_.read_message_max(host_.max_message_bytes);
}

net::any_io_executor WebSocketSession::executor() {
  return ws_.get_executor();
}

void WebSocketSession::accept(const RequestParser::value_type& request) {
  ws_.async_accept(request, [self = shared_from_this()](beast::error_code ec) {
    if (ec) return self->finish();
    self->open_ = true;
    self->read();
  });
}

void WebSocketSession::read() {
  busy_ = false;
  if (host_.draining()) return close(websocket::close_code::going_away);
  in_.clear();
  ws_.async_read(in_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) return self->finish();  // closed, reset, idle, or a message over the body limit
    self->busy_ = true;
    const bool text = self->ws_.got_text();
    std::string message = beast::buffers_to_string(self->in_.data());
    self->host_.run_on_pool([self, text, message = std::move(message)] {
      OpenEnvReply reply = text ? self->openenv_->handle(message)
                                : OpenEnvReply{R"({"type":"error","data":{"message":"messages are JSON )"
                                               R"(text frames, not binary","code":"INVALID_JSON"}})",
                                               false};
      net::post(self->executor(),
                [self, reply = std::move(reply)]() mutable { self->write(std::move(reply)); });
    });
  });
}

void WebSocketSession::write(OpenEnvReply reply) {
  if (done_) return;
  if (reply.text.empty()) {
    if (!reply.close) return read();
    busy_ = false;
    return close(websocket::close_code::normal);
  }
  out_ = std::move(reply.text);
  ws_.text(true);
  ws_.async_write(net::buffer(out_),
                  [self = shared_from_this(), close = reply.close](beast::error_code ec, size_t) {
                    if (ec) return self->finish();
                    if (close) {
                      self->busy_ = false;
                      return self->close(websocket::close_code::normal);
                    }
                    self->read();
                  });
}

void WebSocketSession::close(websocket::close_code code) {
  if (done_ || closing_ || !open_ || busy_) return;
  closing_ = true;
  ws_.async_close(code, [self = shared_from_this()](beast::error_code) { self->finish(); });
}

void WebSocketSession::finish() {
  if (done_) return;
  done_ = true;
  host_.run_on_pool([self = shared_from_this()] {
    self->openenv_->end();
    net::post(self->executor(), [self] { self->host_.finished(); });
  });
}

}  // namespace crl::server
