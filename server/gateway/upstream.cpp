#include "server/gateway/upstream.h"

#include <boost/asio/co_spawn.hpp>
#include <exception>
#include <optional>

namespace crl::server::gateway {

namespace asio = boost::asio;

Upstream::Upstream(UpstreamOptions options) : options_(std::move(options)) {
  http_.endpoint = llm::parse_base_url(options_.base_url, "option --llm");
  http_.max_in_flight = options_.max_in_flight;
  http_.request_timeout_s = options_.request_timeout_s;
  http_.max_retries = options_.max_retries;
  http_.backoff_s = options_.backoff_s;
}

Upstream::~Upstream() = default;  // no call is in flight: the server's workers have stopped

std::unique_ptr<Upstream::Lane> Upstream::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      std::unique_ptr<Lane> lane = std::move(free_.back());
      free_.pop_back();
      return lane;
    }
  }
  auto lane = std::make_unique<Lane>();
  lane->client = std::make_unique<llm::HttpClient>(lane->io, http_);
  std::lock_guard lock(mutex_);
  lanes_.push_back(lane.get());
  if (cancelled_) lane->client->cancel();
  return lane;
}

void Upstream::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
  for (Lane* lane : lanes_) lane->client->cancel();  // posted onto the lane's io_context, run by its caller
}

void Upstream::release(std::unique_ptr<Lane> lane) {
  std::lock_guard lock(mutex_);
  free_.push_back(std::move(lane));
}

UpstreamResult Upstream::generate(const UpstreamCall& call) {
  llm::GenerateCall generate;
  generate.prompt = call.prompt;
  generate.prompt_ids_json = call.prompt_ids_json;
  generate.max_new_tokens = call.max_new_tokens;
  generate.sampling_seed = call.sampling_seed;
  generate.rid = call.rid;
  // The body in pieces: the session's cached id text (call.prompt_ids_json, ~40 KB at 8k tokens) is sent
  // from where it is, never copied into a body string (HttpClient::post_parts writes them as one gather).
  llm::RequestParts parts;
  llm::write_request_parts(options_.api, generate, call.sampling, parts);
  std::vector<std::pair<std::string, std::string>> headers;
  if (!call.routing_key.empty()) headers.emplace_back("X-SMG-Routing-Key", call.routing_key);
  // The coroutine runs here, on this thread's borrowed lane (its client is used by one call at a time).
  std::unique_ptr<Lane> lane = acquire();
  // Completed into a local (no std::future: its shared state, mutex and condition variable cost a few us
  // per call and nothing waits on another thread here).
  std::optional<llm::HttpResponse> done;
  asio::co_spawn(
      lane->io,
      lane->client->post_parts(llm::api_path(options_.api),
                               llm::HttpClient::Body{std::move(parts.head), parts.ids, std::move(parts.tail)},
                               std::move(headers)),
      [&done](std::exception_ptr error, llm::HttpResponse response) {
        if (error) std::rethrow_exception(error);  // out of run_one(), to the caller
        done = std::move(response);
      });
  lane->io.restart();
  while (!done) {
    if (lane->io.run_one() == 0) lane->io.restart();  // out of work only once the coroutine has finished
  }
  const llm::HttpResponse response = std::move(*done);
  release(std::move(lane));
  UpstreamResult out;
  out.seconds = response.seconds;
  switch (response.outcome) {
    case llm::HttpOutcome::kOk:
      break;
    case llm::HttpOutcome::kTimeout:
      out.status = 504;
      out.code = "upstream_timeout";
      out.error = "the LLM server did not answer within " + std::to_string(options_.request_timeout_s) +
                  " s: " + response.error;
      out.retry_after = 1;
      return out;
    case llm::HttpOutcome::kHttpError: {
      const bool retry = response.status >= 500 || response.status == 429;
      out.status = retry ? (response.status == 429 ? 429 : 502) : 502;
      out.code = response.status == 429 ? "upstream_rate_limited" : "upstream_error";
      out.error = "the LLM server answered HTTP " + std::to_string(response.status) + ": " +
                  response.body.substr(0, 300);
      out.retry_after = retry ? 1 : 0;
      return out;
    }
    case llm::HttpOutcome::kConnectionError:
    case llm::HttpOutcome::kCancelled:
      out.status = 503;
      out.code = "upstream_unavailable";
      out.error = "the LLM server could not be reached: " + response.error;
      out.retry_after = 1;
      return out;
  }
  out.answer = llm::parse_response(options_.api, response.body, options_.vocab_size);
  if (!out.answer.ok) {
    out.status = 502;
    out.code = "upstream_malformed";
    out.error = "the LLM server's answer is malformed: " + out.answer.error;
    return out;
  }
  if (static_cast<int64_t>(out.answer.ids.size()) > call.max_new_tokens) {
    out.status = 502;
    out.code = "upstream_malformed";
    out.error = "the LLM server answered " + std::to_string(out.answer.ids.size()) +
                " tokens but max_new_tokens was " + std::to_string(call.max_new_tokens);
    return out;
  }
  out.ok = true;
  return out;
}

}  // namespace crl::server::gateway
