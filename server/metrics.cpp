#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace crl::server {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;
  // le semantics: a value equal to a bound belongs to that bound's bucket.
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::bucket_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

std::string format_metric_value(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (std::isnan(value)) return "NaN";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, const std::string& help,
                                                 const char* type) {
  for (auto& f : families_) {
    if (f->name == name) return *f;
  }
  families_.push_back(std::make_unique<Family>(Family{name, help, type, {}}));
  return *families_.back();
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help,
                                  const std::string& labels) {
  Family& f = family(name, help, "counter");
  f.series.push_back(Series{labels, std::make_unique<Counter>(), nullptr, {}});
  return *f.series.back().counter;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      std::vector<double> bounds, const std::string& labels) {
  Family& f = family(name, help, "histogram");
  f.series.push_back(Series{labels, nullptr, std::make_unique<Histogram>(std::move(bounds)), {}});
  return *f.series.back().histogram;
}

void MetricsRegistry::gauge(const std::string& name, const std::string& help, std::function<double()> read) {
  Family& f = family(name, help, "gauge");
  f.series.push_back(Series{"", nullptr, nullptr, std::move(read)});
}

namespace {

std::string braces(const std::string& labels, const std::string& extra = "") {
  if (labels.empty() && extra.empty()) return "";
  if (labels.empty()) return "{" + extra + "}";
  if (extra.empty()) return "{" + labels + "}";
  return "{" + labels + "," + extra + "}";
}

}  // namespace

std::string MetricsRegistry::render() const {
  std::string out;
  out.reserve(8192);
  for (const auto& f : families_) {
    out += "# HELP " + f->name + " " + f->help + "\n";
    out += "# TYPE " + f->name + " " + f->type + "\n";
    for (const Series& s : f->series) {
      if (s.counter) {
        out += f->name + braces(s.labels) + " " + std::to_string(s.counter->value()) + "\n";
      } else if (s.gauge) {
        out += f->name + braces(s.labels) + " " + format_metric_value(s.gauge()) + "\n";
      } else if (s.histogram) {
        const std::vector<uint64_t> counts = s.histogram->bucket_counts();
        const double sum = s.histogram->sum();
        uint64_t cumulative = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
          cumulative += counts[i];
          const double le = i < s.histogram->bounds().size() ? s.histogram->bounds()[i] : INFINITY;
          out += f->name + "_bucket" + braces(s.labels, "le=\"" + format_metric_value(le) + "\"") + " " +
                 std::to_string(cumulative) + "\n";
        }
        out += f->name + "_sum" + braces(s.labels) + " " + format_metric_value(sum) + "\n";
        out += f->name + "_count" + braces(s.labels) + " " + std::to_string(cumulative) + "\n";
      }
    }
  }
  return out;
}

namespace {

// Seconds: 0.5 ms .. 5 min (a step of a fast environment up to a long rollout).
std::vector<double> latency_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

// The statuses crl serve answers with (router, typed errors, transport refusals); others: code="other".
constexpr int kCodes[] = {200, 400, 404, 405, 408, 409, 410, 413, 415,
                          417, 429, 431, 500, 501, 502, 503, 504};

}  // namespace

ServerMetrics::ServerMetrics() {
  MetricsRegistry& r = registry;
  sessions_created = &r.counter("crl_sessions_created_total", "Episodes created (POST /v1/episodes).");
  sessions_deleted = &r.counter("crl_sessions_deleted_total", "Episodes deleted (DELETE /v1/episodes/{id}).");
  sessions_reaped = &r.counter("crl_sessions_reaped_total", "Episodes removed by the idle reaper.");
  const char* by_code = "HTTP answers by status code (transport refusals included).";
  for (int code : kCodes) {
    by_code_.emplace_back(
        code, &r.counter("crl_http_responses_total", by_code, "code=\"" + std::to_string(code) + "\""));
  }
  other_code_ = &r.counter("crl_http_responses_total", by_code, "code=\"other\"");
  for (int c = 1; c <= 5; ++c) {
    by_class_[c] = &r.counter("crl_http_responses_by_class_total", "HTTP answers by status class.",
                              "class=\"" + std::to_string(c) + "xx\"");
  }
  create_seconds =
      &r.histogram("crl_create_duration_seconds", "Latency of POST /v1/episodes.", latency_buckets());
  step_seconds =
      &r.histogram("crl_step_duration_seconds", "Latency of POST /v1/episodes/{id}/step.", latency_buckets());
  batch_step_seconds =
      &r.histogram("crl_batch_step_duration_seconds", "Latency of POST /v1/batch/step.", latency_buckets());
  rollout_seconds =
      &r.histogram("crl_rollout_duration_seconds", "Latency of POST /v1/rollouts.", latency_buckets());
  compactions = &r.counter("crl_compactions_total", "Context compactions applied (step and rollout mode).");
  action_tokens = &r.counter("crl_action_tokens_total", "Tokens in: action tokens received by steps.");
  prompt_tokens =
      &r.counter("crl_prompt_tokens_total", "Tokens out: append_ids and prompt_ids sent in step answers.");
  rollout_episodes = &r.counter("crl_rollout_episodes_total", "Episodes run by POST /v1/rollouts.");
  llm_calls = &r.counter("crl_llm_calls_total", "LLM requests made in rollout mode.");
  llm_failed_calls = &r.counter("crl_llm_failed_calls_total", "LLM requests that failed in rollout mode.");
  llm_tokens_sent = &r.counter("crl_llm_prompt_tokens_total", "Prompt tokens sent to the LLM server.");
  llm_tokens_received =
      &r.counter("crl_llm_completion_tokens_total", "Completion tokens received from the LLM server.");
  llm_cached_tokens = &r.counter("crl_llm_cached_tokens_total",
                                 "Prompt tokens the LLM server reported as cached (usage cached_tokens).");
  stream_keepalives = &r.counter(
      "crl_gateway_stream_keepalives_total",
      "Streamed gateway calls that sent their head and keep-alive comments while the upstream sampled.");
  stream_failures_after_head = &r.counter(
      "crl_gateway_stream_failures_after_head_total",
      "Streamed gateway calls that failed after their head went out (the API's error event, status 200).");
  streams_sent_live = &r.counter("crl_gateway_streams_live_total",
                                 "Streamed gateway calls whose answer went out as the upstream sampled it.");
  llm_call_seconds = &r.histogram("crl_llm_call_duration_seconds",
                                  "Latency of one LLM request, retries included.", latency_buckets());
  snapshot_writes = &r.counter("crl_snapshot_writes_total", "Session snapshots written (--snapshot-dir).");
  snapshot_write_failures =
      &r.counter("crl_snapshot_write_failures_total", "Session snapshots that could not be written.");
  snapshot_write_seconds = &r.histogram(
      "crl_snapshot_write_duration_seconds",
      "Latency of one snapshot write (serialize, write, fsync, rename).",
      {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5});
  snapshot_restores = &r.counter("crl_snapshot_restores_total",
                                 "Sessions restored from a snapshot by replay on this server.");
  snapshot_restore_failures = &r.counter(
      "crl_snapshot_restore_failures_total",
      "Restores that failed: unreadable, foreign or corrupt snapshot files, replays off the state hash.");
  snapshot_restore_seconds = &r.histogram("crl_snapshot_restore_duration_seconds",
                                          "Latency of one restore (read, claim, replay).", latency_buckets());
  r.gauge("crl_http_connections_open", "Client connections open now.",
          [this] { return static_cast<double>(transport_load().connections); });
  r.gauge("crl_http_requests_in_flight", "Requests being handled now (workers and gateway calls).",
          [this] { return static_cast<double>(transport_load().handling); });
  r.gauge("crl_http_worker_threads", "Worker threads alive (--workers kept; more while all are busy).",
          [this] { return static_cast<double>(transport_load().worker_threads); });
  r.gauge("crl_http_requests_queued", "Requests waiting for a worker thread (only past --max-workers).",
          [this] { return static_cast<double>(transport_load().queued); });
}

uint64_t ServerMetrics::set_transport(std::function<TransportLoad()> read) {
  std::lock_guard lock(transport_mutex_);
  transport_ = std::move(read);
  return ++transport_token_;
}

void ServerMetrics::clear_transport(uint64_t token) {
  std::lock_guard lock(transport_mutex_);
  if (token == transport_token_) transport_ = nullptr;
}

TransportLoad ServerMetrics::transport_load() const {
  std::lock_guard lock(transport_mutex_);  // held while reading: clear_transport waits for a read under way
  return transport_ ? transport_() : TransportLoad{};
}

void ServerMetrics::count_response(int status) {
  Counter* counter = other_code_;
  for (const auto& [code, c] : by_code_) {
    if (code == status) counter = c;
  }
  counter->add();
  const int cls = status / 100;
  if (cls >= 1 && cls <= 5) by_class_[cls]->add();
}

}  // namespace crl::server
