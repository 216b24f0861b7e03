#pragma once
// An HTTP/1.1 client for LLM inference servers (Boost.Beast on Asio, C++20 coroutines), built for many
// concurrent requests from one io_context thread:
//  * keep-alive connection pool: an answered connection that may stay open goes back to the pool and the
//    next request reuses it; the pool never holds more connections than requests may be in flight;
//  * a limit on requests in flight (max_in_flight): further requests wait, in arrival order, for a slot;
//  * a deadline per request (request_timeout_s, counted from the call and covering every attempt and
//    backoff): past it the socket is closed and the request ends as kTimeout (never retried);
//  * retries with exponential backoff (backoff_s, 2x per retry, at most max_retries) on connection errors
//    (refused, reset, closed before a whole answer) and on 5xx answers only; 4xx and 2xx are final. A request
//    that fails on a reused keep-alive connection before any answer byte arrived is retried once at once on a
//    fresh connection without counting (the server may have closed the idle connection);
//  * clean cancellation: cancel() (thread-safe) closes every open socket, wakes waiting and backing-off
//    requests, and makes every current and later request end as kCancelled.
// Not thread-safe otherwise: post() must be called (co_awaited) on the io_context's thread.
// clang-format off
#include <utility>  // first: Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace crl::llm {

// "http://HOST:PORT[/PREFIX]" (the prefix, without a trailing slash, is put before every request path).
struct Endpoint {
  std::string host;
  uint16_t port = 80;
  std::string base_path;
};
// Throws crl::Error naming `where` for anything but an http:// URL with a host and a valid port.
Endpoint parse_base_url(const std::string& url, const std::string& where);

struct HttpClientOptions {
  Endpoint endpoint;
  size_t max_in_flight = 64;  // requests at once, and the most pooled connections
  double request_timeout_s = 120.0;
  int max_retries = 3;
  double backoff_s = 0.05;  // first retry waits this long, then 2x per retry
  size_t max_response_bytes = 64u << 20;
};

enum class HttpOutcome {
  kOk,               // a 2xx answer
  kHttpError,        // a non-2xx answer (a 5xx only after its retries)
  kConnectionError,  // no answer after the retries
  kTimeout,          // the deadline passed
  kCancelled,
};
const char* http_outcome_name(HttpOutcome outcome);
// The retry policy's reading of an answer's status, shared by HttpClient and the gateway's upstream
// exchange (server/gateway/upstream.cpp): a 2xx is kOk, any other status below 500 a final kHttpError, a
// 5xx is retried (nullopt).
std::optional<HttpOutcome> final_outcome_of_status(int status);

struct HttpResponse {
  HttpOutcome outcome = HttpOutcome::kConnectionError;
  int status = 0;      // HTTP status of the last answer (0: none)
  std::string body;    // of the last answer
  std::string error;   // what went wrong (empty when kOk)
  int attempts = 0;    // tries made, the free stale-connection retry included
  double seconds = 0;  // from the call to the result
};

struct HttpClientStats {
  uint64_t requests = 0;
  uint64_t attempts = 0;
  uint64_t connections_opened = 0;
  uint64_t retries = 0;
};

class HttpClient {
 public:
  HttpClient(boost::asio::io_context& io, HttpClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // POSTs `body` (application/json) to base_path + `path`, with `headers` added (e.g. the gateway's
  // X-SMG-Routing-Key, which keeps a session on one replica of an SGLang router).
  boost::asio::awaitable<HttpResponse> post(std::string path, std::string body,
                                            std::vector<std::pair<std::string, std::string>> headers = {});
  // A body in three pieces sent as one gather write (head, `borrowed`, tail) instead of one string: the
  // gateway keeps each session's prompt id text (~40 KB at 8k tokens) and sends it from there, so no call
  // copies it (issue 18's benchmark). `borrowed` must stay valid until the returned awaitable completes.
  struct Body {
    std::string head;
    std::string_view borrowed;
    std::string tail;
    size_t size() const { return head.size() + borrowed.size() + tail.size(); }
  };
  boost::asio::awaitable<HttpResponse> post_parts(std::string path, Body body,
                                                  std::vector<std::pair<std::string, std::string>> headers);
  // GET base_path + `path` (no body), with the same pool, deadline and retries: `crl serve` and `crl
  // rollout` ask the server for its models (served_models.h).
  boost::asio::awaitable<HttpResponse> get(std::string path,
                                           std::vector<std::pair<std::string, std::string>> headers = {});
  // Thread-safe and idempotent (posted onto the io_context).
  void cancel();
  bool cancelled() const { return cancelled_; }
  const HttpClientStats& stats() const { return stats_; }
  const HttpClientOptions& options() const { return options_; }

 private:
  using Stream = boost::beast::tcp_stream;
  using Clock = std::chrono::steady_clock;
  boost::asio::awaitable<HttpResponse> send(const char* method, std::string path, Body body,
                                            std::vector<std::pair<std::string, std::string>> headers);
  boost::asio::awaitable<bool> acquire_slot(Clock::time_point deadline);
  void release_slot();
  void cancel_now();

  boost::asio::io_context& io_;
  HttpClientOptions options_;
  std::vector<boost::asio::ip::tcp::endpoint> resolved_;
  std::vector<std::unique_ptr<Stream>> idle_;
  std::set<Stream*> open_;                       // streams in use, closed by cancel()
  std::set<boost::asio::steady_timer*> timers_;  // waits (slot or backoff), woken by cancel()
  struct Waiter {
    boost::asio::steady_timer timer;
    bool granted = false;
  };
  std::deque<Waiter*> waiting_;
  size_t in_flight_ = 0;
  bool cancelled_ = false;
  HttpClientStats stats_;
};

}  // namespace crl::llm
