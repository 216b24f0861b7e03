#pragma once
// OpenEnv's WebSocket session on an upgraded HTTP connection of `crl serve` (server/http_server.cpp): the
// WebSocket framing, timeouts and closing handshake around an OpenEnvSession (server/openenv_session.h),
// which speaks the protocol. The connection stays this session until it closes. One message at a time: the
// next is read only after the answer to the previous one is written, and every message is handled on the
// server's worker pool (it runs environment code), never on the connection's I/O strand.
//
// Why a class of its own: the HTTP connection's state machine (read, route, answer, linger, drain) and the
// WebSocket session's (accept, read, handle, write, close) share only the socket and the server's pool;
// apart, each reads as one protocol.
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <functional>
#include <memory>
#include <string>

#include "server/http_request.h"
#include "server/openenv_session.h"

namespace crl::server {

// What the session needs from the connection and the server that host it. Every callback is called on the
// connection's strand except `run_on_pool`'s work.
struct WebSocketHost {
  std::function<void(std::function<void()>)> run_on_pool;  // the server's counted worker pool
  std::function<bool()> draining;                          // the server shuts down: close after this message
  std::function<void()> finished;                          // the session is over: close the socket
  std::shared_ptr<void> owner;  // the connection owning the stream, kept alive while the session runs
  double handshake_timeout_s = 0.0;
  double idle_timeout_s = 0.0;  // a silent client is pinged at half of it and dropped at it
  uint64_t max_message_bytes = 0;
};

class WebSocketSession : public std::enable_shared_from_this<WebSocketSession> {
 public:
  WebSocketSession(boost::beast::tcp_stream& stream, std::unique_ptr<OpenEnvSession> openenv,
                   WebSocketHost host);

  // Answers the upgrade request (the opening handshake), then serves messages until the session closes.
  void accept(const RequestParser::value_type& request);
  // Starts the closing handshake with `code` (the drain: going_away). Allowed while a read is pending (an
  // idle client); while a message is being handled or answered, or before the opening handshake is done, it
  // waits: the next read sees the drain and closes then.
  void close(boost::beast::websocket::close_code code);

 private:
  void read();
  void write(OpenEnvReply reply);
  // The session is over: its episode is deleted on the pool (environment code), then the host closes.
  void finish();
  boost::asio::any_io_executor executor();

  WebSocketHost host_;  // first: destroyed last, so the owner's stream outlives ws_
  boost::beast::websocket::stream<boost::beast::tcp_stream&> ws_;
  std::unique_ptr<OpenEnvSession> openenv_;
  boost::beast::flat_buffer in_;
  std::string out_;
  bool open_ = false, busy_ = false, closing_ = false, done_ = false;
};

}  // namespace crl::server
