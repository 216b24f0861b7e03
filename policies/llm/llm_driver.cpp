#include "policies/llm/llm_driver.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cmath>

#include "engine/error.h"

namespace crl::llm {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The decision for one answer; `error` non-empty means the call failed.
Decision to_decision(const HttpResponse& response, const GenerateResult* parsed, const Request& request,
                     std::string& error) {
  Decision decision;
  if (response.outcome != HttpOutcome::kOk) {
    error = std::string("LLM request ") + http_outcome_name(response.outcome) + ": " + response.error;
    if (response.outcome == HttpOutcome::kHttpError && !response.body.empty())
      error += " (" + response.body.substr(0, 200) + ")";
  } else if (!parsed->ok) {
    error = "malformed LLM answer: " + parsed->error;
  } else if (static_cast<int64_t>(parsed->ids.size()) > request.max_new_tokens) {
    error = "the LLM answered " + std::to_string(parsed->ids.size()) + " tokens but max_new_tokens was " +
            std::to_string(request.max_new_tokens);
  }
  if (!error.empty()) {
    decision.failed = true;
    decision.error = error;
    return decision;
  }
  decision.tokens = parsed->ids;
  decision.logprobs = parsed->logprobs;
  decision.finish_reason = parsed->finish_reason;
  decision.weight_version = parsed->weight_version;
  return decision;
}

asio::awaitable<void> drive_one(size_t index, Episode& episode, HttpClient& client, const LlmOptions& options,
                                LlmDriver& driver, DriveStats& stats) {
  std::string body;
  while (!episode.done()) {
    const Clock::time_point engine_start = Clock::now();
    const Request& request = episode.request();
    if (driver.before_request) driver.before_request(index, episode);
    GenerateCall call;
    call.prompt = &request.prompt;
    call.max_new_tokens = request.max_new_tokens;
    call.sampling_seed = sampling_seed(request.stream);
    call.rid = episode.config().rollout_id + "/" + role_name(request.role) + "/" +
               std::to_string(request.stream.ordinal);
    write_request(options.api, call, options.sampling, body);
    CallRecord record;
    record.episode = index;
    record.role = request.role;
    record.prompt_tokens = request.prompt.size();
    record.sampling_seed = call.sampling_seed;
    double engine_seconds = since(engine_start);

    const HttpResponse response = co_await client.post(api_path(options.api), std::move(body));
    body = std::string();

    const Clock::time_point after = Clock::now();
    GenerateResult parsed;
    if (response.outcome == HttpOutcome::kOk)
      parsed = parse_response(options.api, response.body, options.vocab_size, 0, {&request.prompt, {}});
    std::string error;
    Decision decision = to_decision(response, &parsed, request, error);
    record.ok = error.empty();
    record.error = error;
    record.output_tokens = static_cast<int64_t>(decision.tokens.size());
    record.attempts = response.attempts;
    record.cached_tokens = parsed.cached_tokens;
    record.seconds = response.seconds;
    try {
      episode.submit(decision);
    } catch (const Error& e) {  // never for a checked decision; a failed episode rather than a crash
      Decision failed;
      failed.failed = true;
      failed.error = std::string("the LLM answer was rejected: ") + e.what();
      if (!episode.done()) episode.submit(failed);
    }
    engine_seconds += since(after);
    record.client_seconds = engine_seconds;
    stats.calls.push_back(std::move(record));
  }
  if (driver.on_done) driver.on_done(index, episode);
}

}  // namespace

CallSummary summarize(const DriveStats& stats) {
  CallSummary out;
  std::vector<double> latencies;
  double client = 0;
  for (const CallRecord& c : stats.calls) {
    ++out.calls;
    out.failed += c.ok ? 0 : 1;
    out.attempts += static_cast<uint64_t>(c.attempts);
    out.tokens_sent += static_cast<uint64_t>(c.prompt_tokens);
    out.tokens_received += static_cast<uint64_t>(c.output_tokens);
    latencies.push_back(c.seconds);
    client += c.client_seconds;
  }
  std::sort(latencies.begin(), latencies.end());
  // Nearest-rank percentiles.
  const auto rank = [&](double q) {
    if (latencies.empty()) return 0.0;
    const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(latencies.size())));
    return latencies[std::min(latencies.size(), std::max<size_t>(i, 1)) - 1];
  };
  out.latency_p50 = rank(0.50);
  out.latency_p90 = rank(0.90);
  out.latency_p99 = rank(0.99);
  out.latency_max = latencies.empty() ? 0.0 : latencies.back();
  out.client_mean = out.calls == 0 ? 0.0 : client / static_cast<double>(out.calls);
  out.seconds = stats.seconds;
  return out;
}

LlmDriver::LlmDriver(LlmOptions options)
    : options_(std::move(options)), endpoint_(parse_base_url(options_.base_url, "option --llm")) {}

void LlmDriver::cancel() {
  cancelled_ = true;
  std::lock_guard lock(mutex_);
  if (client_ != nullptr) client_->cancel();
}

DriveStats LlmDriver::run(std::span<Episode* const> episodes) {
  DriveStats stats;
  const Clock::time_point start = Clock::now();
  asio::io_context io(1);
  HttpClientOptions http;
  http.endpoint = endpoint_;
  http.max_in_flight = options_.max_in_flight;
  http.request_timeout_s = options_.request_timeout_s;
  http.max_retries = options_.max_retries;
  http.backoff_s = options_.backoff_s;
  HttpClient client(io, http);
  {
    std::lock_guard lock(mutex_);
    client_ = &client;
  }
  if (cancelled_) client.cancel();
  for (size_t i = 0; i < episodes.size(); ++i) {
    asio::co_spawn(io, drive_one(i, *episodes[i], client, options_, *this, stats), asio::detached);
  }
  io.run();
  {
    std::lock_guard lock(mutex_);
    client_ = nullptr;
  }
  stats.http = client.stats();
  stats.seconds = since(start);
  return stats;
}

}  // namespace crl::llm
