#include "server/episode_service.h"

#include <algorithm>
#include <cctype>

#include "engine/error.h"
#include "engine/tokenizer.h"
#include "engine/trajectory_io.h"
#include "envs/registry.h"
#include "server/prompt_delta.h"
#include "wire/api_error.h"
#include "wire/utf8.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote

namespace {

// Decoded token text as a valid protobuf string (byte tokens can split a UTF-8 sequence).
std::string as_text(std::string text) {
  return is_valid_utf8(text) ? text : valid_utf8(text);
}

double now_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

proto::BudgetSpec budget_to(const Budget& b) {
  proto::BudgetSpec spec;
  spec.set_capacity(static_cast<int32_t>(b.capacity));
  spec.set_reserve(static_cast<int32_t>(b.reserve));
  spec.set_tail_k(b.tail_k);
  spec.set_max_compactions(b.max_compactions);
  spec.set_per_turn_cap(static_cast<int32_t>(b.per_turn_cap));
  spec.set_summary_cap(static_cast<int32_t>(b.summary_cap));
  return spec;
}

// The largest valid token id of an episode's codec (text: the tokenizer's vocabulary; symbolic: the
// environment's symbols).
int vocab_of(const Session& s, const Tokenizer& tokenizer) {
  if (s.view == "symbolic") return static_cast<int>(s.episode->env().spec().symbols.size());
  return tokenizer.vocab_size();
}

ApiError episode_done_error(const Session& s) {
  return ApiError(409, "episode_done",
                  "episode " + s.id + " is over (status " +
                      std::string(episode_status_name(s.episode->status())) +
                      "); export it with GET /v1/episodes/" + s.id + "/export",
                  "");
}

std::shared_ptr<Session> locked_open(const std::shared_ptr<Session>& session) {
  if (session->closed) {
    throw ApiError(404, "unknown_episode", "episode \"" + session->id + "\" was deleted or reaped",
                   "episode_id");
  }
  return session;
}

}  // namespace

EpisodeService::EpisodeService(ServiceOptions options)
    : options_(options),
      sessions_(options.max_sessions, options.idle_timeout_s, options.backend_tag),
      exports_(options.ui ? options.keep_exports : 0, options.keep_exports_bytes),
      tokenizer_(make_tokenizer(options.tokenizer)),
      text_codec_(make_text_codec(
          tokenizer_, {},
          load_turn_template(options.chat_template, "--chat-template", options.chat_template_variables))),
      started_s_(now_s()) {
  check_env_params(options_);
  check_backend_tag(options_.backend_tag);
  if (!options_.snapshot_dir.empty()) {
    store_ = std::make_unique<SnapshotStore>(options_.snapshot_dir, options_.backend_tag,
                                             options_.snapshot_address);
  }
  metrics_.registry.gauge("crl_sessions_open", "Episodes open now.",
                          [this] { return static_cast<double>(sessions_.size()); });
}

void check_backend_tag(const std::string& tag) {
  const bool plain = std::all_of(tag.begin(), tag.end(),
                                 [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); });
  if (!plain || tag.size() > 16) {
    throw Error("option --backend-tag", "",
                "value \"" + valid_utf8(tag) +
                    "\" must be 1 to 16 characters of [a-z0-9] (it goes into episode ids: ep-TAG-<hex>)");
  }
}

proto::HealthResponse EpisodeService::health(bool draining) const {
  proto::HealthResponse h;
  h.set_status(draining ? "draining" : "ok");
  h.set_sessions(static_cast<uint32_t>(sessions_.size()));
  h.set_uptime_s(now_s() - started_s_);
  return h;
}

proto::InfoResponse EpisodeService::info() const {
  proto::InfoResponse out;
  out.set_protocol_version(kProtocolVersion);
  out.set_engine_version(CRL_VERSION);
  for (const std::string& name : env_registry().names()) {
    const auto& entry = env_registry().entry(name);
    proto::EnvInfo* env = out.add_environments();
    env->set_name(name);
    env->set_description(entry.description);
    for (const ParamSpec& p : entry.params) {
      proto::ParamInfo* param = env->add_params();
      param->set_name(p.name);
      param->set_type(param_type_name(p.type));
      param->set_default_value(p.default_value);
      param->set_help(p.help);
      param->set_server_only(p.server_only);
    }
    try {  // the views come from the spec of an instance with default parameters
      const auto configured = options_.env_params.find(name);
      const auto prototype =
          configured == options_.env_params.end() ? make_env(name) : make_env(name, configured->second);
      if (prototype->spec().has_text) env->add_views("text");
      if (!prototype->spec().symbols.empty()) env->add_views("symbolic");
      *env->mutable_text_budget() = budget_to(prototype->spec().text_budget);
      *env->mutable_symbolic_budget() = budget_to(prototype->spec().symbolic_budget);
    } catch (const Error&) {
    }
  }
  out.set_tokenizer(tokenizer_->name());
  out.set_tokenizer_fingerprint(tokenizer_->fingerprint());
  out.set_chat_template(options_.chat_template);  // (was "chatml" whatever --chat-template said)
  out.set_chat_template_variables(options_.chat_template_variables);
  proto::Limits* limits = out.mutable_limits();
  limits->set_max_sessions(static_cast<uint32_t>(options_.max_sessions));
  limits->set_max_body_bytes(options_.max_body_bytes);
  limits->set_idle_timeout_s(options_.idle_timeout_s);
  limits->set_request_timeout_s(options_.request_timeout_s);
  limits->set_max_batch(options_.max_batch);
  limits->set_threads(options_.threads);
  limits->set_max_client_timeout_s(options_.max_client_timeout_s);
  limits->set_max_llm_in_flight(options_.max_llm_in_flight);
  *out.mutable_default_budget() = budget_to(Budget{});
  return out;
}

proto::StepResponse EpisodeService::describe(Session& s, bool full_prompt,
                                             std::span<const TokenId> action) const {
  const Episode& e = *s.episode;
  const Codec& codec = e.codec();
  proto::StepResponse out;
  out.set_episode_id(s.id);
  out.set_next_turn_id(s.next_turn_id);
  out.set_rollout_id(e.config().rollout_id);
  out.set_task_id(e.task().id);
  out.set_turn(e.turn());
  out.set_compactions(e.context().compactions());
  out.set_reward(e.reward());
  out.set_state_hash(e.state_hash());

  // The tokens the client will hold next: the next prompt, or (once done) the final window, as spans into
  // the episode's arena (read in place: copying the whole prompt on every step would make an episode
  // quadratic in its length).
  const PromptView next =
      e.done() ? PromptView(&e.context().arena(), e.context().window_spans()) : e.request().prompt;
  // append_ids: what extends (previous prompt + action) to `next`, when it does. Then s.prompt becomes
  // `next`: by appending when it extends, by one copy when the context was rebuilt.
  const size_t held = s.prompt.size() + action.size();
  const bool extends =
      !s.prompt.empty() && static_cast<size_t>(next.size()) >= held && starts_with(next, s.prompt, action);
  if (extends) {
    s.prompt.insert(s.prompt.end(), action.begin(), action.end());
    copy_from(next, held, s.prompt);
    const std::span<const TokenId> appended = std::span<const TokenId>(s.prompt).subspan(held);
    out.mutable_append_ids()->Add(appended.begin(), appended.end());
    out.set_append_text(as_text(codec.decode(appended)));
  } else {
    s.prompt.clear();
    copy_from(next, 0, s.prompt);
  }
  if (!e.done()) {
    const bool summarize = e.request().role == Role::kSummarize;
    out.set_kind(summarize ? "compaction_request" : "observation");
    out.set_role(role_name(e.request().role));
    out.set_max_new_tokens(static_cast<int32_t>(e.request().max_new_tokens));
    out.set_status("running");
    out.set_prompt_rebuilt(!extends);
    if (full_prompt || !extends || summarize) {
      out.mutable_prompt_ids()->Add(s.prompt.begin(), s.prompt.end());
      out.set_prompt_text(as_text(codec.decode(s.prompt)));
    }
  } else {
    out.set_kind("done");
    out.set_status(std::string(episode_status_name(e.status())));
    out.set_reason(e.reason());
    out.set_terminated(e.status() == EpisodeStatus::kCompleted);
    out.set_truncated(e.status() == EpisodeStatus::kTruncated);
    if (full_prompt) {
      out.mutable_prompt_ids()->Add(s.prompt.begin(), s.prompt.end());
      out.set_prompt_text(as_text(codec.decode(s.prompt)));
    }
  }
  return out;
}

proto::StepResponse EpisodeService::step(const std::string& episode_id, const proto::StepRequest& request) {
  if (!request.episode_id().empty() && request.episode_id() != episode_id) {
    throw ApiError(400, "bad_field",
                   "episode_id \"" + request.episode_id() + "\" in the body differs from \"" + episode_id +
                       "\" in the path",
                   "episode_id");
  }
  const std::shared_ptr<Session> session = find_session(episode_id);
  std::lock_guard lock(session->mutex);
  Session& s = *locked_open(session);
  s.touch();
  const uint32_t turn_before = s.next_turn_id;
  proto::StepResponse out = apply_step(s, request, /*replay=*/false);
  if (store_ && s.next_turn_id != turn_before) {
    s.snapshot_current = false;
    if (options_.snapshot_every > 0 && s.next_turn_id % options_.snapshot_every == 0) write_snapshot(s);
  }
  s.touch();
  return out;
}

proto::StepResponse EpisodeService::apply_step(Session& s, const proto::StepRequest& request, bool replay) {
  const proto::Action& action = request.action();
  const std::string action_bytes = action.SerializeAsString();

  // Idempotency: the last applied turn again returns its stored answer; nothing is applied twice.
  if (s.has_last && request.turn_id() + 1 == s.next_turn_id) {
    if (action_bytes != s.last_action) {
      throw ApiError(409, "turn_conflict",
                     "turn_id " + std::to_string(request.turn_id()) +
                         " was already applied with a different action; the next turn_id is " +
                         std::to_string(s.next_turn_id),
                     "turn_id");
    }
    return s.last_response;
  }
  if (s.restored && s.next_turn_id == s.restored_from_turn && request.turn_id() > s.next_turn_id) {
    // Acknowledged turns after the last snapshot died with the backend that held the episode: say so, and
    // where to resume, rather than a bare bad_turn_id.
    throw ApiError(409, "steps_lost",
                   "episode " + s.id + " was restored from a snapshot holding " +
                       std::to_string(s.restored_from_turn) + " turns (its backend went away); turn_id " +
                       std::to_string(request.turn_id()) + " is past it: turns " +
                       std::to_string(s.next_turn_id) + " .. " + std::to_string(request.turn_id() - 1) +
                       " were lost; resume with turn_id " + std::to_string(s.next_turn_id) +
                       " (GET /v1/episodes/" + s.id + " gives the prompt)",
                   "turn_id");
  }
  if (request.turn_id() != s.next_turn_id) {
    throw ApiError(409, "bad_turn_id",
                   "turn_id " + std::to_string(request.turn_id()) + " is out of order: the next turn_id is " +
                       std::to_string(s.next_turn_id),
                   "turn_id");
  }
  Episode& e = *s.episode;
  if (e.done()) throw episode_done_error(s);

  const Role role = e.request().role;
  if (action.kind() != "assistant" && action.kind() != "summary") {
    throw ApiError(400, "bad_field", "action.kind \"" + action.kind() + "\" is not one of assistant, summary",
                   "action.kind");
  }
  if (action.kind() == "summary" && role != Role::kSummarize) {
    throw ApiError(409, "wrong_action_kind",
                   "a summary was sent but no compaction was requested: send kind assistant", "action.kind");
  }
  if (action.kind() == "assistant" && role != Role::kExecute) {
    throw ApiError(409, "wrong_action_kind",
                   "a compaction was requested: the next action must be kind summary, not assistant",
                   "action.kind");
  }

  Decision decision;
  const bool tokenized_here = action.token_ids().empty();
  if (tokenized_here) {
    try {
      decision.tokens = e.codec().encode_action(action.text());
    } catch (const Error& e2) {
      throw ApiError(400, "bad_field", e2.message(), "action.text");
    }
  } else {
    const int vocab = vocab_of(s, *tokenizer_);
    decision.tokens.assign(action.token_ids().begin(), action.token_ids().end());
    for (size_t i = 0; i < decision.tokens.size(); ++i) {
      if (decision.tokens[i] < 0 || decision.tokens[i] >= vocab) {
        const std::string at = "action.token_ids[" + std::to_string(i) + "]";
        throw ApiError(400, "bad_field",
                       at + " = " + std::to_string(decision.tokens[i]) + " is outside the vocabulary 0 .. " +
                           std::to_string(vocab - 1),
                       at);
      }
    }
  }
  const char* tokens_field = tokenized_here ? "action.text" : "action.token_ids";
  if (static_cast<int64_t>(decision.tokens.size()) > e.request().max_new_tokens) {
    throw ApiError(400, "too_many_tokens",
                   std::to_string(decision.tokens.size()) + " action tokens but max_new_tokens is " +
                       std::to_string(e.request().max_new_tokens),
                   tokens_field);
  }
  if (!action.logprobs().empty() && static_cast<size_t>(action.logprobs_size()) != decision.tokens.size()) {
    throw ApiError(400, "bad_field",
                   std::to_string(action.logprobs_size()) + " log-probs for " +
                       std::to_string(decision.tokens.size()) + " tokens",
                   "action.logprobs");
  }
  decision.logprobs.assign(action.logprobs().begin(), action.logprobs().end());
  decision.finish_reason = action.finish_reason().empty() ? "stop" : action.finish_reason();
  if (decision.finish_reason != "stop" && decision.finish_reason != "length" &&
      decision.finish_reason != "abort") {
    throw ApiError(400, "bad_field",
                   "finish_reason \"" + decision.finish_reason + "\" is not one of stop, length, abort",
                   "action.finish_reason");
  }
  const int compactions_before = e.context().compactions();
  try {
    e.submit(decision);
  } catch (const Error& error) {
    const std::string field = error.field() == "logprobs" ? "action.logprobs" : tokens_field;
    throw ApiError(400, "bad_field", error.message(), field);
  }

  ++s.next_turn_id;
  proto::StepResponse out = describe(s, /*full_prompt=*/false, decision.tokens);
  out.set_turn_id(request.turn_id());
  if (tokenized_here) out.mutable_action_ids()->Add(decision.tokens.begin(), decision.tokens.end());
  s.has_last = true;
  s.last_action = action_bytes;
  s.last_response = out;
  if (store_) {
    // The action log of the snapshot: this request as SessionSnapshot.steps entry (field 15, length-
    // delimited), appended to the bytes kept so far.
    proto::StepRequest logged;
    logged.set_turn_id(request.turn_id());
    *logged.mutable_action() = action;
    const std::string bytes = logged.SerializeAsString();
    s.step_log += static_cast<char>((15 << 3) | 2);
    for (uint64_t n = bytes.size();; n >>= 7) {
      if (n < 0x80) {
        s.step_log += static_cast<char>(n);
        break;
      }
      s.step_log += static_cast<char>((n & 0x7f) | 0x80);
    }
    s.step_log += bytes;
  }
  if (replay) return out;
  after_request(s);
  metrics_.compactions->add(
      static_cast<uint64_t>(std::max(0, e.context().compactions() - compactions_before)));
  metrics_.action_tokens->add(decision.tokens.size());
  metrics_.prompt_tokens->add(static_cast<uint64_t>(out.append_ids_size() + out.prompt_ids_size()));
  return out;
}

static double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void EpisodeService::after_request(Session& s) {
  const Episode& e = *s.episode;
  s.steps.store(static_cast<uint32_t>(e.turn()), std::memory_order_relaxed);
  s.compactions.store(static_cast<uint32_t>(e.context().compactions()), std::memory_order_relaxed);
  if (!e.done() || s.done.exchange(true)) return;
  if (!options_.ui || options_.keep_exports == 0) return;
  // Kept when it ends, so that the viewer can open it after a DELETE or the reaper.
  proto::EpisodeSummary summary;
  summary.set_episode_id(s.id);
  summary.set_env(s.env);
  summary.set_view(s.view);
  summary.set_task_id(s.task_id);
  summary.set_status(std::string(episode_status_name(e.status())));
  summary.set_steps(s.steps.load());
  summary.set_compactions(s.compactions.load());
  summary.set_created_unix_s(s.created_unix_s);
  summary.set_finished_unix_s(unix_now_s());
  proto::ExportResponse data = make_export(s);
  summary.set_segments(static_cast<uint32_t>(data.segments_size()));
  exports_.add(std::move(summary), std::move(data));
}

size_t EpisodeService::reap_idle() {
  std::vector<std::string> reaped;
  sessions_.reap_idle(&reaped);
  for (const std::string& id : reaped) forget_snapshot(id);
  metrics_.sessions_reaped->add(reaped.size());
  return reaped.size();
}

proto::EpisodeList EpisodeService::list_episodes(size_t offset, size_t limit) {
  std::vector<std::shared_ptr<Session>> all = sessions_.snapshot();
  // Newest first (ties: by id, so that pages are stable).
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a->created_unix_s != b->created_unix_s ? a->created_unix_s > b->created_unix_s : a->id < b->id;
  });
  proto::EpisodeList out;
  out.set_total(static_cast<uint32_t>(all.size()));
  out.set_offset(static_cast<uint32_t>(offset));
  out.set_limit(static_cast<uint32_t>(limit));
  for (size_t i = offset; i < all.size() && i < offset + limit; ++i) {
    const Session& s = *all[i];
    proto::EpisodeSummary* item = out.add_episodes();
    item->set_episode_id(s.id);
    item->set_env(s.env);
    item->set_view(s.view);
    item->set_task_id(s.task_id);
    item->set_status(s.done.load() ? "done" : "running");
    item->set_steps(s.steps.load());
    item->set_compactions(s.compactions.load());
    item->set_created_unix_s(s.created_unix_s);
  }
  return out;
}

proto::ExportResponse EpisodeService::recent_export(const std::string& episode_id) const {
  const std::shared_ptr<const proto::ExportResponse> found = exports_.find(episode_id);
  if (found == nullptr) {
    throw ApiError(404, "unknown_export",
                   "no recent export \"" + episode_id + "\" (the ring keeps the last " +
                       std::to_string(exports_.capacity()) + " finished episodes; see GET /v1/exports)",
                   "episode_id");
  }
  return *found;
}

proto::BatchStepResponse EpisodeService::batch_step(const proto::BatchStepRequest& request) {
  if (request.steps_size() > static_cast<int>(options_.max_batch)) {
    throw ApiError(400, "batch_too_large",
                   std::to_string(request.steps_size()) + " steps; at most " +
                       std::to_string(options_.max_batch) + " are allowed in one batch",
                   "steps");
  }
  proto::BatchStepResponse out;
  for (int i = 0; i < request.steps_size(); ++i) {
    proto::BatchStepResult* result = out.add_results();
    const proto::StepRequest& item = request.steps(i);
    try {
      if (item.episode_id().empty()) {
        throw ApiError(400, "bad_field", "each batch item needs an episode_id", "episode_id");
      }
      *result->mutable_response() = step(item.episode_id(), item);
      result->set_http_status(200);
    } catch (const ApiError& e) {
      result->set_http_status(static_cast<uint32_t>(e.http_status()));
      proto::ErrorBody body = e.body();
      if (!body.field().empty()) body.set_field("steps[" + std::to_string(i) + "]." + body.field());
      *result->mutable_error() = body;
    }
  }
  return out;
}

proto::EpisodeState EpisodeService::state(const std::string& episode_id) {
  const std::shared_ptr<Session> session = find_session(episode_id);
  std::lock_guard lock(session->mutex);
  Session& s = *locked_open(session);
  s.touch();
  proto::EpisodeState out;
  out.set_episode_id(s.id);
  out.set_env(s.env);
  out.set_view(s.view);
  // describe() with the prompt the client holds as the base would change s.prompt; use a copy.
  std::vector<TokenId> saved = s.prompt;
  *out.mutable_current() = describe(s, /*full_prompt=*/true, {});
  out.mutable_current()->clear_append_ids();
  out.mutable_current()->clear_append_text();
  out.mutable_current()->set_prompt_rebuilt(false);
  s.prompt = std::move(saved);
  out.set_context_tokens(static_cast<int32_t>(s.episode->context().tokens()));
  out.set_idle_s(0);
  *out.mutable_budget() = budget_to(s.episode->config().budget);
  out.set_seed(s.episode->config().seed);
  out.set_group_index(s.episode->config().group_index);
  out.set_sample_index(s.episode->config().sample_index);
  out.set_restored(s.restored);
  out.set_restored_from_turn(s.restored_from_turn);
  return out;
}

proto::ExportResponse EpisodeService::export_segments(const std::string& episode_id) {
  const std::shared_ptr<Session> session = find_session(episode_id);
  std::lock_guard lock(session->mutex);
  Session& s = *locked_open(session);
  s.touch();
  if (!s.episode->done()) {
    throw ApiError(409, "episode_running",
                   "episode " + s.id + " is still running (next turn_id " + std::to_string(s.next_turn_id) +
                       "): step it to done before exporting",
                   "");
  }
  return make_export(s);
}

proto::ExportResponse EpisodeService::make_export(Session& s) const {
  if (!s.trajectory) s.trajectory = s.episode->finish();
  proto::ExportResponse out;
  out.set_episode_id(s.id);
  for (size_t i = 0; i < s.trajectory->segments.size(); ++i) {
    *out.add_segments() = export_segment(*s.trajectory, i, s.view, s.id);
  }
  return out;
}

proto::Segment EpisodeService::export_segment(const Trajectory& trajectory, size_t i, const std::string& view,
                                              const std::string& episode_id) const {
  proto::Segment segment = to_proto(trajectory, i);
  auto& metadata = *segment.mutable_metadata();
  if (!episode_id.empty()) metadata["episode_id"] = episode_id;
  metadata["tokenizer"] = view == "text" ? tokenizer_->name() : "symbolic";
  metadata["tokenizer_fingerprint"] = view == "text" ? tokenizer_->fingerprint() : "";
  metadata["finish_reason"] = segment.finish_reason();  // (to_proto repaired the text and metadata's UTF-8)
  return segment;
}

proto::DeleteResponse EpisodeService::remove(const std::string& episode_id) {
  proto::DeleteResponse out;
  out.set_episode_id(episode_id);
  if (store_) find_session(episode_id);  // an episode held elsewhere or lost is not "deleted"
  if (!sessions_.erase(episode_id)) {
    throw ApiError(404, "unknown_episode", "no episode \"" + episode_id + "\"", "episode_id");
  }
  forget_snapshot(episode_id);
  out.set_deleted(true);
  metrics_.sessions_deleted->add();
  return out;
}

}  // namespace crl::server
