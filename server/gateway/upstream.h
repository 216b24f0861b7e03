#pragma once
// Forwarding to the upstream LLM server (PROTOCOL.md section 3), token-in, token-out, for the gateway's
// worker threads. A call runs on the worker thread that makes it: it borrows a lane (an io_context with its
// own keep-alive HttpClient, policies/llm/http_client.h) from a free list and runs that io_context itself
// until the answer, so no other thread is woken on the way (two thread hand-offs per call fewer than one
// shared io thread; on a busy machine each hand-off costs a scheduler wake-up). Lanes keep their
// connections between calls; there are at most as many as calls ever in flight at once. Every call carries
// the session's routing key as X-SMG-Routing-Key (SGLang's router keeps a session on one replica, so its
// prefix cache stays warm) and a rid / user naming the session, role and ordinal.
#include <boost/asio/io_context.hpp>
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
  std::string base_url;        // http://HOST:PORT[/PREFIX]
  size_t max_in_flight = 256;  // per lane (a lane serves one call at a time: the workers bound the calls)
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
  // Ends every call in flight and every later one as 503 upstream_unavailable (HttpClient::cancel), for
  // the server's drain deadline: a call blocked on a silent LLM then returns at once. Thread-safe; final.
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
