#include "server/episode_service.h"

#include <algorithm>
#include <cctype>

#include "engine/error.h"
#include "engine/tokenizer.h"
#include "engine/trajectory_io.h"
#include "envs/registry.h"
#include "policies/llm/llm_driver.h"
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

// A crl::Error from the engine as a 400 naming the request field (`prefix` + the engine's field).
ApiError bad_input(const Error& e, const std::string& code, const std::string& prefix,
                   const std::string& fallback_field) {
  std::string field = e.field().empty() ? fallback_field : prefix + e.field();
  return ApiError(400, code, e.message().empty() ? e.what() : e.message(), field);
}

void check_task_text(const std::string& value, const char* field) {
  if (value.size() > 256) {
    throw ApiError(
        400, "bad_task",
        std::string(field) + " is " + std::to_string(value.size()) + " bytes long; at most 256 are allowed",
        field);
  }
  for (unsigned char c : value) {
    if (c < 0x21 || c > 0x7e) {
      throw ApiError(400, "bad_task",
                     std::string(field) + " \"" + value + "\" must be printable ASCII without spaces", field);
    }
  }
}

Task task_from(const proto::CreateEpisodeRequest& request) {
  const bool by_split = !request.split().empty() || request.has_index();
  if (!request.task_id().empty()) {
    if (by_split)
      throw ApiError(400, "bad_task", "give either task_id or split + index, not both", "task_id");
    check_task_text(request.task_id(), "task_id");
    return Task{request.task_id(), 0, ""};
  }
  if (!by_split)
    throw ApiError(400, "bad_task", "the task is missing: give task_id, or split + index", "task_id");
  if (request.split() != "train" && request.split() != "dev" && request.split() != "test") {
    throw ApiError(400, "bad_task", "split \"" + request.split() + "\" is not one of train, dev, test",
                   "split");
  }
  if (!request.has_index())
    throw ApiError(400, "bad_task", "split " + request.split() + " needs an index", "index");
  return Task{request.split() + "-" + std::to_string(request.index()), request.index(), request.split()};
}

Budget budget_from(const proto::BudgetSpec& spec) {
  Budget b;
  if (spec.has_capacity()) b.capacity = spec.capacity();
  if (spec.has_reserve()) b.reserve = spec.reserve();
  if (spec.has_tail_k()) b.tail_k = spec.tail_k();
  if (spec.has_max_compactions()) b.max_compactions = spec.max_compactions();
  if (spec.has_per_turn_cap()) b.per_turn_cap = spec.per_turn_cap();
  if (spec.has_summary_cap()) b.summary_cap = spec.summary_cap();
  return b;
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
      sessions_(options.max_sessions, options.idle_timeout_s),
      tokenizer_(make_tokenizer(options.tokenizer)),
      text_codec_(make_text_codec(tokenizer_, {}, chat_template_by_name(options.chat_template))),
      started_s_(now_s()) {}

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
    }
    try {  // the views come from the spec of an instance with default parameters
      const auto prototype = make_env(name);
      if (prototype->spec().has_text) env->add_views("text");
      if (!prototype->spec().symbols.empty()) env->add_views("symbolic");
    } catch (const Error&) {
    }
  }
  out.set_tokenizer(tokenizer_->name());
  out.set_tokenizer_fingerprint(tokenizer_->fingerprint());
  out.set_chat_template("chatml");
  proto::Limits* limits = out.mutable_limits();
  limits->set_max_sessions(static_cast<uint32_t>(options_.max_sessions));
  limits->set_max_body_bytes(options_.max_body_bytes);
  limits->set_idle_timeout_s(options_.idle_timeout_s);
  limits->set_request_timeout_s(options_.request_timeout_s);
  limits->set_max_batch(options_.max_batch);
  limits->set_threads(options_.threads);
  *out.mutable_default_budget() = budget_to(Budget{});
  return out;
}

EpisodeService::Built EpisodeService::build_episode(const proto::CreateEpisodeRequest& request) const {
  if (request.env().empty()) throw ApiError(400, "unknown_env", "the env field is missing", "env");
  if (!env_registry().contains(request.env())) {
    std::string known;
    for (const std::string& n : env_registry().names()) known += (known.empty() ? "" : ", ") + n;
    throw ApiError(400, "unknown_env",
                   "unknown environment \"" + request.env() + "\" (registered: " + known + ")", "env");
  }
  const Task task = task_from(request);
  if (!request.rollout_id().empty()) check_task_text(request.rollout_id(), "rollout_id");
  const std::string view = request.view().empty() ? "text" : request.view();
  if (view != "text" && view != "symbolic") {
    throw ApiError(400, "bad_field", "view \"" + view + "\" is not one of text, symbolic", "view");
  }
  EpisodeConfig config;
  config.budget = budget_from(request.budget());
  try {
    config.budget.validate("budget");
  } catch (const Error& e) {
    throw bad_input(e, "bad_budget", "budget.", "budget");
  }
  config.seed = request.seed();
  config.group_index = request.group_index();
  config.sample_index = request.sample_index();
  config.rollout_id = request.rollout_id();

  std::unique_ptr<Env> env;
  std::map<std::string, std::string> params(request.params().begin(), request.params().end());
  // A task given as split + index selects the split of an environment that declares a `split` parameter
  // (the synthetic suite); a contradicting params.split is an error rather than a silent choice.
  if (!task.split.empty()) {
    const auto& declared = env_registry().entry(request.env()).params;
    if (std::any_of(declared.begin(), declared.end(), [](const ParamSpec& p) { return p.name == "split"; })) {
      auto [it, inserted] = params.emplace("split", task.split);
      if (!inserted && it->second != task.split) {
        throw ApiError(400, "bad_task",
                       "split \"" + task.split + "\" contradicts params.split \"" + it->second + "\"",
                       "split");
      }
    }
  }
  try {
    env = make_env(request.env(), params, "environment \"" + request.env() + "\"");
  } catch (const Error& e) {
    throw bad_input(e, "bad_param", "params.", "params");
  }
  std::shared_ptr<const Codec> codec;
  try {
    codec = view == "text" ? text_codec_ : make_codec(view, env->spec());
    if (view == "text" && !env->spec().has_text) make_codec(view, env->spec());  // throws: no text view
  } catch (const Error& e) {
    throw ApiError(400, "bad_field", e.message(), "view");
  }

  Built built;
  built.episode = std::make_unique<Episode>(std::move(env), codec, config);
  built.task = task;
  built.view = view;
  return built;
}

proto::StepResponse EpisodeService::create(const proto::CreateEpisodeRequest& request) {
  Built built = build_episode(request);
  const Task& task = built.task;
  auto session = std::make_shared<Session>();
  session->env = request.env();
  session->view = built.view;
  sessions_.reserve();  // 429 when full
  try {
    session->episode = std::move(built.episode);
    try {
      session->episode->start(task);
    } catch (const Error& e) {
      throw ApiError(400, "bad_task", e.message(), task.split.empty() ? "task_id" : "index");
    }
  } catch (...) {
    sessions_.unreserve();
    throw;
  }
  std::lock_guard lock(session->mutex);
  sessions_.insert(session);
  proto::StepResponse out = describe(*session, /*full_prompt=*/true, {});
  out.set_prompt_rebuilt(true);
  return out;
}

namespace {

// True when the tokens of `view` begin with `first` followed by `second` (compared span by span, in place).
bool starts_with(const PromptView& view, std::span<const TokenId> first, std::span<const TokenId> second) {
  size_t matched = 0;  // tokens of first ++ second compared so far
  const size_t total = first.size() + second.size();
  for (const Span& span : view.spans()) {
    std::span<const TokenId> ids = view.tokens(span);
    while (!ids.empty() && matched < total) {
      const std::span<const TokenId> want =
          matched < first.size() ? first.subspan(matched) : second.subspan(matched - first.size());
      const size_t n = std::min(ids.size(), want.size());
      if (!std::equal(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n), want.begin())) return false;
      ids = ids.subspan(n);
      matched += n;
    }
    if (matched == total) return true;
  }
  return matched == total;
}

// Appends the tokens of `view` from position `from` on to `out`.
void copy_from(const PromptView& view, size_t from, std::vector<TokenId>& out) {
  size_t position = 0;
  for (const Span& span : view.spans()) {
    const std::span<const TokenId> ids = view.tokens(span);
    if (position + ids.size() > from) {
      const size_t skip = from > position ? from - position : 0;
      out.insert(out.end(), ids.begin() + static_cast<ptrdiff_t>(skip), ids.end());
    }
    position += ids.size();
  }
}

}  // namespace

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
  const std::shared_ptr<Session> session = sessions_.find(episode_id);
  std::lock_guard lock(session->mutex);
  Session& s = *locked_open(session);
  s.touch();
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
  s.touch();
  return out;
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
  const std::shared_ptr<Session> session = sessions_.find(episode_id);
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
  return out;
}

proto::ExportResponse EpisodeService::export_segments(const std::string& episode_id) {
  const std::shared_ptr<Session> session = sessions_.find(episode_id);
  std::lock_guard lock(session->mutex);
  Session& s = *locked_open(session);
  s.touch();
  if (!s.episode->done()) {
    throw ApiError(409, "episode_running",
                   "episode " + s.id + " is still running (next turn_id " + std::to_string(s.next_turn_id) +
                       "): step it to done before exporting",
                   "");
  }
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
  metadata["finish_reason"] = segment.finish_reason();
  if (!is_valid_utf8(segment.response_text())) segment.set_response_text(valid_utf8(segment.response_text()));
  for (auto& [key, value] : metadata) {
    if (!is_valid_utf8(value)) value = valid_utf8(value);
  }
  return segment;
}

proto::RolloutsResponse EpisodeService::rollouts(const proto::RolloutsRequest& request) {
  if (request.episodes_size() == 0)
    throw ApiError(400, "bad_field", "episodes is empty: give at least one", "episodes");
  if (request.episodes_size() > static_cast<int>(options_.max_batch)) {
    throw ApiError(400, "batch_too_large",
                   std::to_string(request.episodes_size()) + " episodes; at most " +
                       std::to_string(options_.max_batch) + " are allowed in one rollout request",
                   "episodes");
  }
  const proto::LlmSpec& spec = request.llm();
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
  if (spec.max_in_flight() > 0) llm.max_in_flight = spec.max_in_flight();
  if (spec.request_timeout_s() > 0) llm.request_timeout_s = spec.request_timeout_s();
  if (spec.has_max_retries()) {
    if (spec.max_retries() < 0)
      throw ApiError(400, "bad_field", "llm.max_retries must be >= 0", "llm.max_retries");
    llm.max_retries = spec.max_retries();
  }
  llm.vocab_size = tokenizer_->vocab_size();
  if (const auto stop = tokenizer_->special_token("<|im_end|>")) llm.sampling.stop_token_ids = {*stop};

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
      try {
        built.episode->start(built.task);
      } catch (const Error& e) {
        throw ApiError(400, "bad_task", e.message(), built.task.split.empty() ? "task_id" : "index");
      }
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

  proto::RolloutsResponse out;
  for (auto& episode : episodes) {
    const Trajectory t = episode->finish();
    proto::RolloutResult* r = out.add_rollouts();
    r->set_rollout_id(t.rollout_id);
    r->set_task_id(t.task_id);
    r->set_status(std::string(episode_status_name(t.status)));
    r->set_reason(as_text(t.reason));
    r->set_reward(t.reward);
    r->set_compactions(t.compactions);
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

proto::DeleteResponse EpisodeService::remove(const std::string& episode_id) {
  proto::DeleteResponse out;
  out.set_episode_id(episode_id);
  if (!sessions_.erase(episode_id)) {
    throw ApiError(404, "unknown_episode", "no episode \"" + episode_id + "\"", "episode_id");
  }
  out.set_deleted(true);
  return out;
}

}  // namespace crl::server
