#pragma once
// Forwarding to the upstream LLM server (PROTOCOL.md section 3), token-in, token-out, for the gateway's
// handlers (a fiber on an I/O thread, or a worker: server/http_server.h). A call borrows a lane (one
// keep-alive connection) from a free list and does the HTTP exchange there with non-blocking socket calls;
// where it must wait for the socket, a call on a fiber (server/fiber.h) suspends until its I/O thread's event
// loop sees the socket ready (the lane's socket is registered with that loop once per connection, and free
// lanes are kept per loop), and a call on a plain thread polls. No other thread is woken on the way. The
// request goes out as one gather sendmsg (head, body head, the session's cached id text, body tail: no copy
// of the ~40 KB id text per call); the answer is parsed by Beast's parser. The exchange keeps
// policies/llm/http_client.h's semantics: a deadline over every attempt and backoff, retries with exponential
// backoff on connection errors and 5xx only, a stale keep-alive connection retried once at once on a fresh
// one, cancel() final. Lanes keep their connections between calls; there are at most as many as calls ever in
// flight at once. Every call carries the session's routing key as X-SMG-Routing-Key (SGLang's router keeps a
// session on one replica, so its prefix cache stays warm) and a rid / user naming the session, role and
// ordinal.
#include <sys/socket.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/turn.h"
#include "policies/llm/http_client.h"
#include "policies/llm/llm_api.h"
#include "server/gateway/host_lookup.h"

namespace crl::server {
class Fiber;
enum class FiberWait;
}  // namespace crl::server

namespace crl::server::gateway {

class StreamKeepalive;

// Where a streamed call's sampled ids go as they arrive (the gateway's live answer: live_answer.h).
class SampledTokens {
 public:
  virtual ~SampledTokens() = default;
  // The answer so far (its ids as the upstream sent them, and the counts its last event gave: cached_tokens,
  // prompt_tokens); called again each time more ids arrive.
  virtual void sampled(const llm::GenerateResult& so_far) = 0;
};

struct UpstreamOptions {
  llm::ApiKind api = llm::ApiKind::kSglang;
  std::string base_url;  // http://HOST:PORT[/PREFIX]
  size_t max_in_flight =
      256;  // per lane (a lane serves one call at a time: the server's threads bound the calls)
  double request_timeout_s = 120.0;  // per call, every retry included: past it the call is a 504
  int max_retries = 1;               // on connection errors and 5xx (policies/llm/http_client.h)
  double backoff_s = 0.05;
  int vocab_size = 0;  // answered ids outside [0, vocab_size) are a malformed answer
};

struct UpstreamCall {
  const PromptView* prompt = nullptr;
  std::string_view prompt_ids_json;  // when not empty: the text of prompt's ids (prompt_ids_text.h)
  int64_t max_new_tokens = 0;
  uint64_t sampling_seed = 0;
  std::string rid;
  std::string routing_key;
  llm::SamplingParams sampling;
  // While the call waits (connect, send, backoff, the answer), beat() whenever keepalive->due() (a streamed
  // call: stream_keepalive.h; a host name's lookup does not beat); null or inactive: none.
  StreamKeepalive* keepalive = nullptr;
  // Not null: the answer is asked for as a stream ("stream": true; policies/llm/streamed_answer.h reads
  // SGLang's events and the OpenAI API's chunks) and its ids go here as they arrive. Once some have gone, a
  // failure is final: no retry samples the answer again.
  SampledTokens* sampled = nullptr;
};

struct UpstreamResult {
  bool ok = false;
  int status = 0;          // the HTTP status to answer the harness with when !ok
  std::string code;        // upstream_unavailable | upstream_timeout | upstream_error | upstream_malformed
  std::string error;       // what went wrong
  double retry_after = 0;  // > 0 for failures worth retrying (5xx, 429, connection errors, timeouts)
  llm::GenerateResult answer;
  double seconds = 0;
};

class Upstream {
 public:
  enum class Wait { kReady, kTimeout, kCancelled };  // how a wait on a lane's socket ended
  using Clock = std::chrono::steady_clock;
  // Throws crl::Error for a malformed base URL.
  explicit Upstream(UpstreamOptions options);
  ~Upstream();
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  // Blocks the calling thread until the answer, a failure or the deadline. Thread-safe.
  UpstreamResult generate(const UpstreamCall& call);
  // Ends every call in flight and every later one as 503 upstream_unavailable (each lane's eventfd made
  // readable), for the server's drain deadline: a call blocked on a silent LLM then returns at once.
  // Thread-safe; final.
  void cancel();
  // Drops the lanes' registrations with the server's io_context (their connections stay open), for the
  // server once its event loop has ended and no call runs on a fiber: asio objects must not outlive their
  // io_context, and the Upstream outlives the server.
  void leave_io_context();
  const UpstreamOptions& options() const { return options_; }

 private:
  // A lane: one keep-alive connection used by one call at a time. Its socket calls are made by the call
  // itself (llm::HttpClient's asio coroutines around them cost ~35 us of a ~100 us gateway call, issue 18's
  // profile); only its waits go to the event loop, on a fiber. `wake` (an eventfd) is made readable by
  // cancel(); every poll watches it (a fiber's wait is cancelled on its strand instead).
  struct FiberIo;  // a lane's socket registered with a fiber's io_context (upstream.cpp)
  struct Lane {
    int fd = -1;
    int wake = -1;
    std::unique_ptr<FiberIo> io;  // created when a call on a fiber (server/fiber.h) first uses the lane
    ~Lane();
  };
  // Waits for `events` on `fd` (none when fd < 0: a backoff) until `deadline` or cancel(): poll(2) on a
  // plain thread; on a fiber, the fiber suspends and its I/O thread runs on (no thread blocks).
  Wait wait(Lane& lane, int fd, short events, std::chrono::steady_clock::time_point deadline);
  // Reads what the lane's connection has, at most `size` bytes into `data`: `got` of them (0: the upstream
  // closed it), or what failed in `error`. On a fiber one asio read (Fiber::read: no epoll_ctl per call, as
  // a wait for readiness costs), on a plain thread poll(2) then recv. Returns how the wait ended (anything
  // but kReady: nothing was read).
  Wait read(Lane& lane, char* data, size_t size, std::chrono::steady_clock::time_point deadline, size_t& got,
            std::string& error);
  // A fiber's wait on the lane, before and after: `fd` registered with the fiber's loop and the wait
  // numbered for cancel() (null, with `early` set, when the wait ends before it starts); then the outcome,
  // or none when the descriptor's wait failed without a cancel().
  FiberIo* enter_wait(Lane& lane, const Fiber& fiber, int fd, Wait& early);
  std::optional<Wait> leave_wait(FiberIo& io, FiberWait waited);
  // The lane's FiberIo on `fiber`'s io_context (made, or moved there, as needed).
  FiberIo& fiber_io(Lane& lane, const Fiber& fiber);
  // The upstream host's addresses (failure set when there are none), from lookup_ (host_lookup.h): the
  // call waits for the lookup on its lane (a fiber's I/O thread runs on meanwhile) until its deadline
  // (waited: kTimeout) or cancel() (kCancelled), and then leaves a stuck lookup behind. Once per new
  // connection (lanes keep theirs).
  std::vector<HostAddress> resolve(Lane& lane, std::chrono::steady_clock::time_point deadline, Wait& waited,
                                   std::string& failure);
  // Closes `fd` (lane.fd or a socket being connected), first taking it out of the lane's io_context.
  static void close_fd(Lane& lane, int fd);
  struct StreamRead;  // a streamed answer read as it arrives (upstream.cpp)
  llm::HttpResponse exchange(Lane& lane, const std::string& head, const llm::RequestParts& body,
                             StreamKeepalive* keepalive, StreamRead* stream);
  std::unique_ptr<Lane> acquire();
  void release(std::unique_ptr<Lane> lane);

  UpstreamOptions options_;
  llm::HttpClientOptions http_;
  HostLookup lookup_;
  std::mutex mutex_;
  // Free lanes by the event loop their socket is registered with (null: none, a plain thread's).
  std::map<const void*, std::vector<std::unique_ptr<Lane>>> free_;
  std::vector<Lane*> lanes_;  // every lane, free or in use (lanes live as long as the Upstream)
  bool cancelled_ = false;    // under mutex_
  uint64_t waits_ = 0;  // numbers the fibers' waits (under mutex_), so cancel() ends only the current one
};

}  // namespace crl::server::gateway
