#pragma once
// The HTTP/1.1 transport (Boost.Beast on Boost.Asio): accepts connections, reads requests with a body limit
// and a deadline, hands them to route(), writes the answers, and shuts down gracefully.
//
// Threads: `threads` threads run one io_context; each connection is a strand, so one connection's requests
// are handled in order while different connections run in parallel (per-episode serialization is the session
// table's job).
// Limits and timeouts: a request (headers and body) must arrive within request_timeout_s of the previous
// answer, else the connection is closed (408 when part of a request had arrived); a body over max_body_bytes
// gets 413 and the connection is closed; headers over 16 KiB get 431; unparsable HTTP gets 400. A client that
// half-closes (shutdown of its write side) is answered for what it sent, then closed.
// Shutdown (SIGTERM, SIGINT or request_stop()): stop accepting, answer every request already being read or
// handled (its answer says Connection: close), close idle connections, stop the reaper, then run() returns.
// After drain_timeout_s everything still open is closed.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "server/episode_service.h"

namespace crl::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 7411;  // 0: an ephemeral port (read it back with port())
  int threads = 2;
  uint32_t max_body_bytes = 8u << 20;
  double request_timeout_s = 30.0;
  double drain_timeout_s = 10.0;
  bool handle_signals = true;  // SIGTERM and SIGINT start the drain
};

class HttpServer {
 public:
  // Binds and listens at once (throws crl::Error when the address cannot be bound).
  HttpServer(HttpOptions options, EpisodeService& service);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  // Serves until the drain completes; runs on the calling thread plus threads - 1 more.
  void run();
  // Starts the drain (thread-safe, idempotent), as SIGTERM does.
  void request_stop();
  bool draining() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace crl::server
