#pragma once
// GET /metrics (issue 19 item 4): a small registry of counters, gauges and fixed-bucket histograms, rendered
// in the Prometheus text exposition format (version 0.0.4).
//
// Lock-cheap: every update is one relaxed atomic add (a histogram: one bucket, the count and the sum);
// nothing allocates or locks after registration. Registration happens once, in ServerMetrics' constructor (it
// is not thread-safe), so the label sets are fixed: a status code outside the registered list is counted
// under code="other". Output order is registration order (deterministic). A histogram's _count is the sum of
// the bucket counts read for that rendering, so the +Inf bucket and _count always agree even while requests
// run.
//
// Where /metrics is answered: on the I/O thread, like GET /health (rendering reads atomics only and never
// waits for environment code), so a scrape works while every worker is busy.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace crl::server {

class Counter {
 public:
  void add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Histogram {
 public:
  // `bounds`: the upper bounds of the buckets, strictly increasing (+Inf is implied).
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket (not cumulative) counts, bounds().size() + 1 of them (the last: above every bound).
  std::vector<uint64_t> bucket_counts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0};
};

class MetricsRegistry {
 public:
  // `labels`: a fixed label set in exposition syntax without braces (`code="404"`), or empty. Series with
  // the same name share one family (HELP and TYPE from the first registration). The returned reference
  // lives as long as the registry.
  Counter& counter(const std::string& name, const std::string& help, const std::string& labels = "");
  Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                       const std::string& labels = "");
  // A gauge read at rendering time (e.g. the number of open sessions).
  void gauge(const std::string& name, const std::string& help, std::function<double()> read);
  std::string render() const;

 private:
  struct Series {
    std::string labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Histogram> histogram;
    std::function<double()> gauge;
  };
  struct Family {
    std::string name, help, type;
    std::vector<Series> series;
  };
  Family& family(const std::string& name, const std::string& help, const char* type);
  std::vector<std::unique_ptr<Family>> families_;
};

// "0.005", "1", "+Inf" style numbers (shortest round-trip form).
std::string format_metric_value(double value);

// The HTTP transport's load, read when /metrics renders (server/http_server.h HttpServer::Stats).
struct TransportLoad {
  size_t connections = 0, handling = 0, worker_threads = 0, queued = 0;
};

// The metrics of `crl serve`. Counted by the HTTP layer (answers by status code), the router (latencies
// around the service calls) and the service (sessions, compactions, tokens, LLM calls of rollout mode).
struct ServerMetrics {
  ServerMetrics();
  MetricsRegistry registry;

  Counter* sessions_created = nullptr;
  Counter* sessions_deleted = nullptr;
  Counter* sessions_reaped = nullptr;
  Histogram* create_seconds = nullptr;
  Histogram* step_seconds = nullptr;
  Histogram* batch_step_seconds = nullptr;
  Histogram* rollout_seconds = nullptr;
  Counter* compactions = nullptr;
  Counter* action_tokens = nullptr;  // tokens in: the actions received (step mode)
  Counter* prompt_tokens = nullptr;  // tokens out: append_ids + prompt_ids sent (step mode)
  Counter* rollout_episodes = nullptr;
  Counter* llm_calls = nullptr;
  Counter* llm_failed_calls = nullptr;
  Counter* llm_tokens_sent = nullptr;
  Counter* llm_tokens_received = nullptr;
  Counter* llm_cached_tokens = nullptr;  // the upstream's cached_tokens (prefix cache hits)
  // Gateway streamed calls whose head went out early (--stream-keepalive), and those of them that then failed
  // (answered with the API's error event, counted as 200 among the responses: the status was sent).
  Counter* stream_keepalives = nullptr;
  Counter* stream_failures_after_head = nullptr;
  // Gateway streamed calls whose answer went out as the upstream sampled it (gateway/live_answer.h).
  Counter* streams_sent_live = nullptr;
  Histogram* llm_call_seconds = nullptr;
  // crl serve --snapshot-dir (server/snapshot_store.h).
  Counter* snapshot_writes = nullptr;
  Counter* snapshot_write_failures = nullptr;
  Histogram* snapshot_write_seconds = nullptr;
  Counter* snapshot_restores = nullptr;
  Counter* snapshot_restore_failures = nullptr;
  Histogram* snapshot_restore_seconds = nullptr;

  // One answer with this HTTP status (crl_http_responses_total{code,class}).
  void count_response(int status);
  std::string render() const { return registry.render(); }
  // The server answering this /metrics reports its load through `read` (thread-safe): the gauges
  // crl_http_connections_open, crl_http_requests_in_flight, crl_http_worker_threads and
  // crl_http_requests_queued (0 while no server reports). Returns a token for clear_transport, which removes
  // `read` unless a later server has replaced it.
  uint64_t set_transport(std::function<TransportLoad()> read);
  void clear_transport(uint64_t token);

 private:
  TransportLoad transport_load() const;
  mutable std::mutex transport_mutex_;
  std::function<TransportLoad()> transport_;
  uint64_t transport_token_ = 0;
  std::vector<std::pair<int, Counter*>> by_code_;
  Counter* other_code_ = nullptr;
  Counter* by_class_[6] = {};
};

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace crl::server
