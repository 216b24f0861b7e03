// Rollout mode (POST /v1/rollouts): the engine drives the LLM itself. The request's llm block becomes the
// LLM driver's options, with every client-chosen deadline and concurrency bounded by the server's limits;
// the episodes are created as POST /v1/episodes would create them (text view only) and run to their ends.
#include <cmath>

#include "engine/error.h"
#include "policies/llm/llm_driver.h"
#include "server/episode_service.h"
#include "wire/api_error.h"
#include "wire/utf8.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote

namespace {

// The llm block as driver options. llm.request_timeout_s above the server's limit is 400 over_limit (not
// clamped: a client must know its deadline); left out, it is the driver's default, or the limit if lower.
llm::LlmOptions llm_options(const proto::LlmSpec& spec, const ServiceOptions& options,
                            const Tokenizer& tokenizer) {
  llm::LlmOptions llm;
  try {
    llm.api = llm::parse_api_kind(spec.api().empty() ? "sglang" : spec.api(), "llm.api");
  } catch (const Error& e) {
    throw ApiError(400, "bad_field", e.message(), "llm.api");
  }
  if (spec.base_url().empty())
    throw ApiError(400, "bad_field", "llm.base_url is missing (http://HOST:PORT)", "llm.base_url");
  try {
    llm::parse_base_url(spec.base_url(), "llm.base_url");
  } catch (const Error& e) {
    throw ApiError(400, "bad_field", e.message(), "llm.base_url");
  }
  llm.base_url = spec.base_url();
  llm.sampling.model = spec.model();
  if (spec.has_temperature()) llm.sampling.temperature = spec.temperature();
  if (spec.has_top_p()) llm.sampling.top_p = spec.top_p();
  if (spec.has_top_k()) llm.sampling.top_k = spec.top_k();
  if (spec.max_in_flight() > options.max_llm_in_flight) {
    throw ApiError(400, "over_limit",
                   "llm.max_in_flight = " + std::to_string(spec.max_in_flight()) +
                       " is above the server's limit of " + std::to_string(options.max_llm_in_flight),
                   "llm.max_in_flight");
  }
  if (spec.max_in_flight() > 0) llm.max_in_flight = spec.max_in_flight();
  const double timeout = spec.request_timeout_s();
  if (std::isnan(timeout) || timeout < 0) {
    throw ApiError(400, "bad_field",
                   "llm.request_timeout_s must be a positive number of seconds (0: default)",
                   "llm.request_timeout_s");
  }
  if (timeout > options.max_client_timeout_s) {
    throw ApiError(400, "over_limit",
                   "llm.request_timeout_s = " + format_seconds(timeout) +
                       " s is above the server's limit of " + format_seconds(options.max_client_timeout_s) +
                       " s for client timeouts (crl serve --max-client-timeout)",
                   "llm.request_timeout_s");
  }
  llm.request_timeout_s =
      timeout > 0 ? timeout : std::min(llm.request_timeout_s, options.max_client_timeout_s);
  if (spec.has_max_retries()) {
    if (spec.max_retries() < 0)
      throw ApiError(400, "bad_field", "llm.max_retries must be >= 0", "llm.max_retries");
    llm.max_retries = spec.max_retries();
  }
  llm.vocab_size = tokenizer.vocab_size();
  if (const auto stop = tokenizer.special_token("<|im_end|>")) llm.sampling.stop_token_ids = {*stop};
  return llm;
}

}  // namespace

proto::RolloutsResponse EpisodeService::rollouts(const proto::RolloutsRequest& request) {
  if (request.episodes_size() == 0)
    throw ApiError(400, "bad_field", "episodes is empty: give at least one", "episodes");
  if (request.episodes_size() > static_cast<int>(options_.max_batch)) {
    throw ApiError(400, "batch_too_large",
                   std::to_string(request.episodes_size()) + " episodes; at most " +
                       std::to_string(options_.max_batch) + " are allowed in one rollout request",
                   "episodes");
  }
  const llm::LlmOptions llm = llm_options(request.llm(), options_, *tokenizer_);

  std::vector<std::unique_ptr<Episode>> episodes;
  std::vector<Episode*> pointers;
  for (int i = 0; i < request.episodes_size(); ++i) {
    const std::string prefix = "episodes[" + std::to_string(i) + "].";
    try {
      const proto::CreateEpisodeRequest& item = request.episodes(i);
      if (!item.view().empty() && item.view() != "text") {
        throw ApiError(400, "bad_field", "rollout mode samples text with an LLM: view must be text", "view");
      }
      Built built = build_episode(item);
      start_episode(built);
      episodes.push_back(std::move(built.episode));
      pointers.push_back(episodes.back().get());
    } catch (const ApiError& e) {
      proto::ErrorBody body = e.body();
      throw ApiError(e.http_status(), body.code(), body.message(),
                     body.field().empty() ? "" : prefix + body.field());
    }
  }
  llm::LlmDriver driver(llm);
  const llm::DriveStats stats = driver.run(pointers);
  const llm::CallSummary calls = llm::summarize(stats);
  for (const llm::CallRecord& c : stats.calls) {
    metrics_.llm_call_seconds->observe(c.seconds);
    metrics_.llm_cached_tokens->add(static_cast<uint64_t>(std::max<int64_t>(0, c.cached_tokens)));
  }
  metrics_.llm_calls->add(calls.calls);
  metrics_.llm_failed_calls->add(calls.failed);
  metrics_.llm_tokens_sent->add(calls.tokens_sent);
  metrics_.llm_tokens_received->add(calls.tokens_received);
  metrics_.rollout_episodes->add(episodes.size());

  proto::RolloutsResponse out;
  for (auto& episode : episodes) {
    const Trajectory t = episode->finish();
    proto::RolloutResult* r = out.add_rollouts();
    r->set_rollout_id(t.rollout_id);
    r->set_task_id(t.task_id);
    r->set_status(std::string(episode_status_name(t.status)));
    r->set_reason(valid_utf8(t.reason));
    r->set_reward(t.reward);
    r->set_compactions(t.compactions);
    metrics_.compactions->add(static_cast<uint64_t>(std::max(0, t.compactions)));
    r->set_turns(episode->turn());
    r->set_state_hash(episode->state_hash());
    r->set_group_index(t.group_index);
    r->set_sample_index(t.sample_index);
    for (size_t i = 0; i < t.segments.size(); ++i) *r->add_segments() = export_segment(t, i, "text", "");
  }
  out.set_requests(static_cast<uint32_t>(calls.calls));
  out.set_failed_requests(static_cast<uint32_t>(calls.failed));
  out.set_tokens_sent(static_cast<uint32_t>(std::min<uint64_t>(calls.tokens_sent, UINT32_MAX)));
  out.set_tokens_received(static_cast<uint32_t>(std::min<uint64_t>(calls.tokens_received, UINT32_MAX)));
  out.set_seconds(calls.seconds);
  out.set_latency_p50_s(calls.latency_p50);
  out.set_latency_p99_s(calls.latency_p99);
  return out;
}

}  // namespace crl::server
