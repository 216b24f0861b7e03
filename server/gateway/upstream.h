#pragma once
// Forwarding to the upstream LLM server (PROTOCOL.md section 3), token-in, token-out, for the gateway's
// handlers (an I/O thread or a worker, server/http_server.h). A call runs on the thread that makes it: it
// borrows a lane (one keep-alive connection) from a free list and does the HTTP exchange there with blocking,
// poll-driven socket calls, so no other thread is woken on the way and no event loop runs around a wait the
// thread makes anyway. The request goes out as one gather sendmsg (head, body head, the session's cached id
// text, body tail: no copy of the ~40 KB id text per call); the answer is parsed by Beast's parser. The
// exchange keeps policies/llm/http_client.h's semantics: a deadline over every attempt and backoff, retries
// with exponential backoff on connection errors and 5xx only, a stale keep-alive connection retried once at
// once on a fresh one, cancel() final. Lanes keep their connections between calls; there are at most as
// many as calls ever in flight at once. Every call carries the session's routing key as X-SMG-Routing-Key
// (SGLang's router keeps a session on one replica, so its prefix cache stays warm) and a rid / user naming
// the session, role and ordinal.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/turn.h"
#include "policies/llm/http_client.h"
#include "policies/llm/llm_api.h"

namespace crl::server::gateway {

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
  const UpstreamOptions& options() const { return options_; }

 private:
  // A lane: one keep-alive connection used by one call at a time, on the calling thread, with blocking
  // (poll-driven) socket calls: the calling thread waits for the answer anyway, and the asio reactor and
  // coroutine machinery of llm::HttpClient around that wait cost ~35 us of a ~100 us gateway call (issue
  // 18's profile). `wake` (an eventfd) is made readable by cancel(); every wait polls it.
  struct Lane {
    int fd = -1;
    int wake = -1;
    ~Lane();
  };
  llm::HttpResponse exchange(Lane& lane, const std::string& head, const llm::RequestParts& body);
  std::unique_ptr<Lane> acquire();
  void release(std::unique_ptr<Lane> lane);

  UpstreamOptions options_;
  llm::HttpClientOptions http_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Lane>> free_;
  std::vector<Lane*> lanes_;  // every lane, free or in use (lanes live as long as the Upstream)
  bool cancelled_ = false;
};

}  // namespace crl::server::gateway
