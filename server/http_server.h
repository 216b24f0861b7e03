#pragma once
// The HTTP/1.1 transport (Boost.Beast on Boost.Asio): accepts connections, reads requests with a body limit
// and a deadline, hands them to route(), writes the answers, and shuts down gracefully.
//
// Threads. `threads` I/O threads, each running its own event loop (io_context; the calling thread's holds
// the acceptor, signals and timers): they accept, read, parse and write, and never run environment code. A
// connection lives on one loop, assigned round robin at accept, and is a strand there (its requests are
// handled in order; a connection reads its next request only after answering the previous one). Every routed
// request except GET /health runs on a separate worker pool (server/worker_pool.h: steps, batches, creates,
// deletes, exports, info, rollouts, and the idle reaper), and its answer is posted back to the connection's
// strand. A step that blocks (a shell command, a remote environment, a silent LLM behind POST /v1/rollouts)
// therefore holds one worker, never an I/O thread: /health is answered on the I/O thread at any load. The
// pool keeps `workers` threads and grows while every thread is busy, by default to one thread per request in
// flight (at most one per connection), so a rollout that holds its worker for its whole run never makes
// another request wait: a trainer's 256 concurrent rollouts are 256 requests at the LLM at once.
// `max_workers` caps it; requests beyond the cap wait in the pool's queue (bounded by max_connections).
// Threads beyond `workers` leave after 10 s without work. Connections: at most max_connections at once; one
// beyond gets 503 too_many_connections with Retry-After: 1 at once (before its request is read) and is closed
// after at most 1 s of lingering (at most 64 such refusals at once; beyond, a connection is closed without an
// answer), so an fd limit is not the only protection. Request reading (server/http_request.h): RFC 9112
// framing checks (Transfer-Encoding only as a single `chunked`, else 501; Transfer-Encoding with
// Content-Length, several Content-Length fields, obs-fold, bare CR/LF or control bytes in the head: 400),
// then every refusal closes the connection. Limits and timeouts: a request (headers and body) must arrive
// within request_timeout_s of the previous answer, else the connection is closed (408 when part of a request
// had arrived); a body over max_body_bytes gets 413 and the connection is closed; a head over 16 KiB, or a
// chunk header or trailer section over 32 KiB, gets 431. A client that half-closes (shutdown of its write
// side) is answered for what it sent, then closed. After a refusal the connection is half-closed and drained
// for at most 1 s before it is closed, so that the client can read the answer. Shutdown (SIGTERM, SIGINT or
// request_stop()): stop accepting, close idle connections, answer every request already being read or handled
// (its answer says Connection: close). The drain deadline is hard: after drain_timeout_s every request still
// running gets 503 drain_deadline (Connection: close; it may or may not have been applied), what is still
// being read is closed, and run() returns at most about 1 s later (the time given to write those answers),
// even if environment code is still blocked on a worker. unfinished() then says how many requests never
// returned: `crl serve` exits at once without waiting for them (sandboxed children die with the process),
// while the destructor of HttpServer waits for them. GET /metrics (server/metrics.h) is answered on the I/O
// thread too, like GET /health: it reads counters only. Streamed answers (HttpAnswer::stream, `crl lm
// serve`'s server-sent events): the head goes out with Transfer-Encoding: chunked as soon as the handler
// returns; the producer then runs on the same worker (still counted as in flight, so the drain waits for it)
// and each piece it writes is sent when the connection is free, pieces written meanwhile as one chunk (no
// empty chunk, no copy per piece beyond the pile-up). Each chunk's write has the request deadline (a client
// that does not read is cut off); waiting for the producer has none. A failed write or a client that closed
// makes the producer's next write return false; the drain deadline cuts a stream (no last chunk: the client
// sees an incomplete body), and so does a producer that throws. HTTP/1.0 requests get the whole body with a
// Content-Length at its end. The gateway (`crl serve --llm`, HttpOptions::gateway) is the exception to "I/O
// threads never run handlers": each of its calls runs on a fiber (server/fiber.h) on the I/O thread that read
// it, on the connection's strand. Where the call waits (the upstream LLM's answer, the session's lock)
// the fiber suspends and the thread serves its other connections, so no thread is held per call in flight,
// whatever their number. At the drain deadline the gateway's upstream waits are cancelled, and run() runs the
// fibers still suspended to their end (within the 1 s grace) before it returns. A gateway call on a fiber may
// begin its answer before it returns (HttpCall::begin_answer: a streamed call's keep-alive while the upstream
// samples, gateway/stream_keepalive.h): the head goes out then, the pieces it writes follow as a streamed
// answer's do, and what the handler returns is the rest of the body.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/episode_service.h"
#include "server/router.h"

namespace crl::server {

namespace gateway {
class Gateway;
}

struct HttpOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 7411;  // 0: an ephemeral port (read it back with port())
  int threads = 2;       // I/O threads, an event loop each
  int workers = 32;      // worker threads kept for routed requests (blocking environment code, rollouts)
  int max_workers = 0;   // the pool's ceiling (>= workers); 0: one thread per request in flight
  uint32_t max_connections = 1024;
  uint32_t max_body_bytes = 8u << 20;
  // Routes answered before the engine's own, on the worker pool (`crl lm serve`): an answer, or nullopt to
  // fall through to route(). Must not throw. Empty: none.
  std::function<std::optional<HttpAnswer>(const HttpCall&)> routes;
  double request_timeout_s = 30.0;
  double drain_timeout_s = 10.0;
  bool handle_signals = true;  // SIGTERM and SIGINT start the drain
  std::string openenv_env;     // OpenEnv sessions (GET /ws): the environment of a reset that names none
  // The compaction gateway's routes (`crl serve --llm`, server/gateway/gateway.h); null: off. Not owned.
  gateway::Gateway* gateway = nullptr;
  // Gateway requests run on fibers on the I/O thread that read them (no worker-pool hop, no thread held
  // while the upstream answers). false: they go to the pool, a thread each (kept to compare the two in
  // tests).
  bool gateway_inline = true;
};

class HttpServer {
 public:
  // Binds and listens at once (throws crl::Error when the address cannot be bound).
  HttpServer(HttpOptions options, EpisodeService& service);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  // Serves until the drain completes or its deadline passes; runs on the calling thread plus threads - 1
  // more I/O threads (the worker pool has its own).
  void run();
  // Counts, thread-safe (tests wait on them instead of sleeping): open connections, connections with part
  // of a request received, requests handed to the worker pool whose handler has not returned; the pool's
  // threads alive now and requests waiting for one (only past max_workers).
  struct Stats {
    size_t connections = 0;
    size_t reading = 0;
    size_t handling = 0;
    size_t worker_threads = 0;
    size_t queued = 0;
  };
  Stats stats() const;
  // After run(): requests whose handler had not returned when run() returned (blocked past the deadline).
  size_t unfinished() const;
  // Starts the drain (thread-safe, idempotent), as SIGTERM does.
  void request_stop();
  bool draining() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace crl::server
