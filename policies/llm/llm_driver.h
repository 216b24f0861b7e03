#pragma once
// Drives episodes with an LLM served over HTTP (PROTOCOL.md section 3): every pending Request of every
// episode becomes one generate call to SGLang's `/generate` or an OpenAI-compatible `/v1/completions`, and
// the answer (the exact sampled ids and their log-probs, never re-tokenised) goes back into the episode.
//
// Concurrency: one io_context thread runs one coroutine per episode; an episode has at most one request in
// flight, and the HttpClient caps the total (max_in_flight) over a keep-alive connection pool. So N episodes
// progress concurrently without a thread per episode, and the order in which answers arrive changes nothing:
// each episode's trajectory depends only on its own requests and answers.
//
// Per request:
//  * max_new_tokens is the episode's (already clamped to what is left of the budget and to the per-turn or
//    summary cap), so the server is never asked for more than fits;
//  * the sampling seed is derived from the request's stream key (run seed, task, sample, role, ordinal;
//    sampling_seed() in llm_api.h), so paired runs send identical seeds whatever the concurrency;
//  * the finish reason (stop | length | abort) becomes the segment's finish reason; an aborted execution
//    turn ends the episode as aborted;
//  * a failed request (connection error or 5xx after the retries, a 4xx, a timeout, a malformed or
//    inconsistent answer, cancellation) ends that episode as failed, with the reason, and the others go on.
#include <atomic>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "envs/episode.h"
#include "policies/llm/http_client.h"
#include "policies/llm/llm_api.h"

namespace crl::llm {

struct LlmOptions {
  ApiKind api = ApiKind::kSglang;
  std::string base_url;  // http://HOST:PORT[/PREFIX]
  SamplingParams sampling;
  size_t max_in_flight = 64;
  double request_timeout_s = 120.0;
  int max_retries = 3;
  double backoff_s = 0.05;
  int vocab_size = 0;  // answered ids must lie in [0, vocab_size) (0: unchecked)
};

// One generate call, for metrics.
struct CallRecord {
  size_t episode = 0;
  Role role = Role::kExecute;
  bool ok = false;
  int64_t prompt_tokens = 0;  // sent
  int64_t output_tokens = 0;  // received
  int64_t cached_tokens = 0;  // the server's usage cached_tokens (prefix cache hits), 0 when not reported
  int attempts = 0;
  double seconds = 0;         // wall time of the HTTP exchange, retries included
  double client_seconds = 0;  // engine time around it: request encoding, answer parsing, episode step
  uint64_t sampling_seed = 0;
  std::string error;
};

struct DriveStats {
  std::vector<CallRecord> calls;  // in completion order
  HttpClientStats http;
  double seconds = 0;
};

// Totals and latency percentiles over the calls of a run (for reports and benchmarks).
struct CallSummary {
  uint64_t calls = 0, failed = 0, attempts = 0;
  uint64_t tokens_sent = 0, tokens_received = 0;
  double latency_p50 = 0, latency_p90 = 0, latency_p99 = 0, latency_max = 0;  // seconds per call
  double client_mean = 0;  // engine seconds per call, outside the HTTP exchange
  double seconds = 0;      // wall time of the run
};
CallSummary summarize(const DriveStats& stats);

class LlmDriver {
 public:
  // Throws crl::Error for a malformed base URL.
  explicit LlmDriver(LlmOptions options);

  // Called on the driver thread before each request is sent (e.g. to read environment state for metrics).
  std::function<void(size_t index, const Episode& episode)> before_request;
  // Called on the driver thread when an episode has ended.
  std::function<void(size_t index, const Episode& episode)> on_done;

  // Runs every episode (already started) to its end. Returns when all have ended (cancelled ones end as
  // failed with reason "cancelled").
  DriveStats run(std::span<Episode* const> episodes);
  // Thread-safe: cancels the current run (in-flight requests are abandoned, their episodes fail) and every
  // later one.
  void cancel();

  const LlmOptions& options() const { return options_; }

 private:
  LlmOptions options_;
  Endpoint endpoint_;
  std::mutex mutex_;
  HttpClient* client_ = nullptr;  // of the current run
  std::atomic<bool> cancelled_{false};
};

}  // namespace crl::llm
