#include "server/gateway/gateway_session.h"

#include <algorithm>
#include <chrono>

#include "engine/error.h"
#include "server/gateway/gateway_error.h"
#include "server/gateway/live_answer.h"
#include "server/gateway/sampled_reply.h"
#include "wire/utf8.h"

namespace crl::server::gateway {

namespace {

// The `k` most likely alternatives at each position, most likely first (SGLang lists its top k so already;
// the OpenAI API adds the sampled token to its k, in no promised order).
std::vector<std::vector<llm::TopLogprob>> most_likely(std::vector<std::vector<llm::TopLogprob>> top, int k) {
  for (std::vector<llm::TopLogprob>& position : top) {
    std::stable_sort(
        position.begin(), position.end(),
        [](const llm::TopLogprob& a, const llm::TopLogprob& b) { return a.logprob > b.logprob; });
    if (position.size() > static_cast<size_t>(k)) position.resize(static_cast<size_t>(k));
  }
  return top;
}

std::optional<EpisodeStatus> parse_status(const std::string& status) {
  if (status == "completed") return EpisodeStatus::kCompleted;
  if (status == "truncated") return EpisodeStatus::kTruncated;
  if (status == "aborted") return EpisodeStatus::kAborted;
  if (status == "failed") return EpisodeStatus::kFailed;
  return std::nullopt;
}

// The rollout as one trajectory: the parts (windows closed by a history edit, threads' windows) in the
// order they closed, N_after recounted over all of them. With more than one thread, `segment_threads` in
// the metadata names each segment's thread (its index, in the order of the threads' first calls).
Trajectory merge(std::vector<Trajectory> parts, const std::vector<int>& threads) {
  std::string segment_threads;
  if (std::any_of(threads.begin(), threads.end(), [](int t) { return t != 0; })) {
    for (size_t p = 0; p < parts.size(); ++p) {
      for (size_t i = 0; i < parts[p].segments.size(); ++i)
        segment_threads += (segment_threads.empty() ? "" : ",") + std::to_string(threads[p]);
    }
  }
  Trajectory out = std::move(parts.back());
  if (!segment_threads.empty()) out.metadata["segment_threads"] = segment_threads;
  if (parts.size() > 1) {
    std::vector<Segment> segments;
    int compactions = 0, dropped = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      for (Segment& s : parts[i].segments) segments.push_back(std::move(s));
      compactions += parts[i].compactions;
      dropped += parts[i].dropped_segments;
    }
    for (Segment& s : out.segments) segments.push_back(std::move(s));
    out.segments = std::move(segments);
    out.compactions += compactions;
    out.dropped_segments += dropped;
  }
  int64_t after = out.sampled_tokens();
  for (Segment& s : out.segments) {
    after -= s.n_sampled;
    s.n_after = after;
  }
  return out;
}

}  // namespace

GatewaySession::GatewaySession(std::string id, const GatewayShared& shared, SessionConfig config,
                               std::shared_ptr<const TemplateVariant> variant, bool variant_fixed)
    : id_(std::move(id)),
      shared_(shared),
      variant_(std::move(variant)),
      variant_fixed_(variant_fixed),
      config_(std::move(config)) {
  if (config_.rollout_id.empty()) config_.rollout_id = id_;
  touch();
}

void GatewaySession::touch() {
  last_used_ns.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

double GatewaySession::idle_seconds() const {
  return static_cast<double>(std::chrono::steady_clock::now().time_since_epoch().count() -
                             last_used_ns.load(std::memory_order_relaxed)) *
         1e-9;
}

void GatewaySession::make_episode(Thread& t, std::vector<TokenId> system, std::vector<TokenId> rest,
                                  bool opens_turn) {
  auto env = std::make_unique<HarnessEnv>();
  t.env = env.get();
  EpisodeConfig episode;
  episode.budget = config_.budget;
  episode.seed = config_.seed;
  episode.group_index = config_.group_index;
  episode.sample_index = config_.sample_index;
  episode.rollout_id = config_.rollout_id;
  t.episode = std::make_unique<Episode>(std::move(env), codec(t), episode);
  t.generation = ++generations_;
  t.ids_text.invalidate();
  t.env->stage_start(std::move(system), std::move(rest), opens_turn);
  Task task;
  task.id = "gateway/" + id_ + thread_suffix(t);  // (each thread its own sampling streams)
  t.episode->start(task);
  t.held.reset();
}

void GatewaySession::start_part(Thread& t, const ChatTurn& turn, std::vector<uint64_t> keys) {
  std::vector<TokenId> system, rest;
  t.render_now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const FirstPrompt first =
      variant_->renderer.first_prompt(turn.messages, turn.tools, t.render_now, system, rest, &t.converted);
  t.system_opened_user_turn = first.system_opens_user_turn;
  make_episode(t, std::move(system), std::move(rest), first.opens_turn);
  t.known = std::move(keys);
  t.tools_key = tools_key_of(turn);
  t.window.reset();  // a new part renders the harness's list until its first rebuild
  t.step_answers.clear();
}

void GatewaySession::note_rebuild(Thread& t, const ChatTurn& turn, const std::string& summary_text) {
  if (t.episode->done()) return;  // truncated: the rebuilt window did not fit
  const std::vector<Message>& messages = turn.messages;
  // The window keeps the newest k steps (k = tail_k -> 0): from the oldest kept step's answer on; none
  // kept: from the answer to come, after everything the harness has sent.
  const auto kept = static_cast<size_t>(t.episode->context().steps_in_window());
  const size_t from = kept > 0 && kept <= t.step_answers.size() ? t.step_answers[t.step_answers.size() - kept]
                                                                : messages.size();
  WindowConversation window;
  if (!messages.empty() && messages[0].role == MessageRole::kSystem) window.messages.push_back(messages[0]);
  // The resume turn as the window holds it: the preface and the summary's text (envs/codec.h).
  window.messages.push_back(Message{MessageRole::kUser, TextPrompts{}.resume_preface + summary_text, {}, {}});
  window.lead = window.messages.size();
  window.from = from;
  window.messages.insert(window.messages.end(), messages.begin() + static_cast<ptrdiff_t>(from),
                         messages.end());
  t.window = std::move(window);
  // Only the window's steps can be kept by the next rebuild: the list stays as long as the window.
  t.step_answers.erase(t.step_answers.begin(),
                       t.step_answers.end() - static_cast<ptrdiff_t>(std::min(kept, t.step_answers.size())));
}

void GatewaySession::start_text_part(Thread& t, const std::string& prompt) {
  t.system_opened_user_turn = false;
  make_episode(t, {}, variant_->renderer.text(prompt));
  known_text_ = prompt;
}

void GatewaySession::close_part(Thread& t, const std::string& why) {
  if (!t.episode->done()) {
    if (t.held) {
      t.env->stage_step({}, 0.0, true, false);
      t.episode->submit(t.held->decision);
    } else {
      Decision failed;
      failed.failed = true;
      failed.error = why;
      t.episode->submit(failed);
    }
  }
  t.held.reset();
  Trajectory part = t.episode->finish();
  part.metadata["part_end"] = why;
  parts_.push_back(std::move(part));
  part_threads_.push_back(t.index);
  t.episode.reset();
  t.env = nullptr;
}

void GatewaySession::throw_done(const Thread& t) const {
  throw GatewayError(400, "invalid_request_error", "context_length_exceeded",
                     "session " + quote(id_) + " has no room left: " + t.episode->reason() +
                         " (the rollout is " + std::string(episode_status_name(t.episode->status())) +
                         "; post its reward to end it)",
                     "messages");
}

void GatewaySession::check_open(bool plain) {
  if (ended_) {
    throw GatewayError(409, "invalid_request_error", "session_ended",
                       "session " + quote(id_) + " has ended (its reward was posted); use a new session id",
                       "session_id");
  }
  if (plain_ && *plain_ != plain) {
    throw bad_request("mixed_apis",
                      "session " + quote(id_) + " speaks " + (*plain_ ? "plain completions" : "chat") +
                          "; one session cannot mix chat and plain completions",
                      "session_id");
  }
  plain_ = plain;
}

Completion GatewaySession::complete_on(Thread& t, const ChatTurn& turn) {
  const std::string& prompt = *turn.prompt;
  if (!t.episode) {
    start_text_part(t, prompt);
    return drive(t, turn);
  }
  if (t.episode->done()) throw_done(t);
  if (t.held && prompt == known_text_) return stored_answer(t, turn);  // a retry: nothing sampled twice
  if (t.held) {
    const std::string& answer = t.held->completion.reply.content;
    if (prompt.size() >= known_text_.size() + answer.size() && prompt.starts_with(known_text_) &&
        prompt.compare(known_text_.size(), answer.size(), answer) == 0) {
      const std::string_view fresh = std::string_view(prompt).substr(known_text_.size() + answer.size());
      t.env->stage_step(variant_->renderer.text(fresh), 0.0, false, false);
      const Decision decision = std::move(t.held->decision);
      t.held.reset();
      t.episode->submit(decision);
      known_text_ = prompt;
      return drive(t, turn);
    }
  }
  if (!t.held && prompt == known_text_) return drive(t, turn);  // after a failed upstream call: send it again
  close_part(t, "the harness rewrote its history");
  ++history_edits_;
  start_text_part(t, prompt);
  return drive(t, turn);
}

Completion GatewaySession::chat_on(Thread& t, const ChatTurn& turn, std::vector<uint64_t> keys,
                                   bool same_prefix) {
  if (!t.episode) {
    start_part(t, turn, std::move(keys));
    return drive(t, turn);
  }
  if (t.episode->done()) throw_done(t);
  const size_t n0 = t.known.size();
  if (same_prefix) {
    if (t.held && keys.size() == n0) return stored_answer(t, turn);  // a retry: nothing sampled twice
    if (t.held && (keys[n0] == t.held->key || keys[n0] == t.held->anthropic_key)) {
      std::span<const Message> conversation = turn.messages;
      size_t answer = n0;
      if (t.window) {
        // The window's conversation: its messages through the harness's n0 - 1 (what the last answered
        // call sent; a refused call's messages are cut off again), then the answer and the new messages.
        t.window->messages.resize(t.window->lead + (n0 - t.window->from));
        t.window->messages.insert(t.window->messages.end(),
                                  turn.messages.begin() + static_cast<ptrdiff_t>(n0), turn.messages.end());
        conversation = t.window->messages;
        answer = n0 - t.window->from + t.window->lead;
      }
      TurnsAfterAnswer turns = variant_->renderer.observation(t.held->decision.tokens, conversation, answer,
                                                              turn.tools, t.render_now, &t.converted);
      t.env->stage_step(std::move(turns.ids), 0.0, false, false, turns.opens_turn);
      const Decision decision = std::move(t.held->decision);
      t.held.reset();
      t.step_answers.push_back(n0);
      t.episode->submit(decision);
      t.known = std::move(keys);
      return drive(t, turn);
    }
    if (!t.held && keys.size() == n0) return drive(t, turn);  // after a failed upstream call: send it again
  }
  close_part(t, "the harness rewrote its history");
  ++history_edits_;
  start_part(t, turn, std::move(keys));
  return drive(t, turn);
}

UpstreamResult GatewaySession::call_upstream(Thread& t, const Request& request, const ChatTurn& turn,
                                             int64_t max_new_tokens) {
  UpstreamCall call;
  call.prompt = &request.prompt;
  call.prompt_ids_json = t.ids_text.text(request.prompt, t.generation, request.compactions);
  call.max_new_tokens = max_new_tokens;
  call.sampling_seed = llm::sampling_seed(request.stream);
  call.rid =
      id_ + thread_suffix(t) + "/" + role_name(request.role) + "/" + std::to_string(request.stream.ordinal);
  call.routing_key = turn.routing_key.empty() ? id_ : turn.routing_key;
  call.sampling = config_.sampling;
  call.keepalive = turn.keepalive;
  if (request.role == Role::kExecute) call.sampled = turn.live;  // (started by drive())
  if (turn.temperature) call.sampling.temperature = *turn.temperature;
  if (turn.top_p) call.sampling.top_p = *turn.top_p;
  if (turn.top_k) call.sampling.top_k = *turn.top_k;
  if (request.role == Role::kExecute) {
    call.sampling.stop = turn.stop;  // a summary is never cut short
    call.sampling.top_logprobs = turn.top_logprobs;
    call.sampling.json_schema = turn.json_schema;  // a summary is free text
  }
  ++calls_;
  UpstreamResult result;
  {
    // Other threads' calls go on while this one waits; this thread is this call's (Thread::busy), and
    // nothing the upstream reads (the episode's prompt, the thread's id text) changes meanwhile.
    const ScopedUnlock unlocked(mutex);
    result = shared_.upstream->generate(call);
  }
  if (ServerMetrics* m = shared_.metrics) {
    m->llm_calls->add();
    m->llm_call_seconds->observe(result.seconds);
    m->llm_tokens_sent->add(static_cast<uint64_t>(request.prompt.size()));
    if (result.ok) {
      m->llm_tokens_received->add(result.answer.ids.size());
      m->llm_cached_tokens->add(static_cast<uint64_t>(std::max<int64_t>(0, result.answer.cached_tokens)));
    } else {
      m->llm_failed_calls->add();
    }
  }
  if (result.ok) cached_tokens_.push_back(result.answer.cached_tokens);
  return result;
}

void GatewaySession::fail_call(const UpstreamResult& result) {
  ++failures_;
  last_failure_ = result.error;
  GatewayError error(result.status, result.status == 504 ? "timeout_error" : "upstream_error", result.code,
                     result.error);
  if (result.retry_after > 0) error.with_retry_after(result.retry_after);
  throw error;
}

AssistantReply GatewaySession::read_answer(std::string& text, const ChatTurn& turn,
                                           const std::string& id_prefix) const {
  if (*plain_) return AssistantReply{std::move(text), {}, {}};  // a plain completion: the text as sampled
  return read_sampled_reply(text, shared_.tool_format, shared_.reasoning_format, turn.tool_choice, turn.tools,
                            id_prefix);
}

Completion GatewaySession::drive(Thread& t, const ChatTurn& turn) {
  // The summary the trigger asked for (window + instruction), from the same upstream; its answer closes a
  // summary segment and the episode rebuilds the window.
  while (!t.episode->done() && t.episode->request().role == Role::kSummarize) {
    const Request& request = t.episode->request();
    UpstreamResult result = call_upstream(t, request, turn, request.max_new_tokens);
    if (!result.ok) fail_call(result);
    Decision summary;
    summary.tokens = std::move(result.answer.ids);
    summary.logprobs = std::move(result.answer.logprobs);
    summary.finish_reason = result.answer.finish_reason == "abort" ? "length" : result.answer.finish_reason;
    const bool render = !*plain_ && variant_->renderer.renders_template();
    const std::string summary_text = render ? codec(t)->decode(codec(t)->summary_body(summary.tokens)) : "";
    t.episode->submit(summary);
    if (render) note_rebuild(t, turn, summary_text);
    if (ServerMetrics* m = shared_.metrics) m->compactions->add();
  }
  if (t.episode->done()) throw_done(t);
  const Request& request = t.episode->request();
  // Clamped to what is left of the budget (the episode's) and to the harness's own limit.
  const int64_t max_new =
      turn.max_tokens > 0 ? std::min(turn.max_tokens, request.max_new_tokens) : request.max_new_tokens;
  Completion completion;
  completion.id = std::string(*plain_ ? "cmpl-" : "chatcmpl-") + id_ + "-" + std::to_string(request.turn) +
                  "-" + std::to_string(parts_.size()) + (t.index > 0 ? "-t" + std::to_string(t.index) : "");
  completion.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  completion.prompt_tokens = request.prompt.size();
  if (turn.live !=
      nullptr)  // the answer goes out as it is sampled, under the id and time it is recorded with
    turn.live->start(
        completion, *codec(t),
        LiveRules{shared_.tool_format, shared_.reasoning_format, turn.tool_choice, *plain_, turn.stop});
  UpstreamResult result = call_upstream(t, request, turn, max_new);
  if (!result.ok) fail_call(result);
  // (A harmony answer is read whole: its messages' headers say which text is content and which a call.)
  std::string text = codec(t)->decode(shared_.tool_format == ToolCallFormat::kHarmony && !*plain_
                                          ? std::span<const TokenId>(result.answer.ids)
                                          : codec(t)->summary_body(result.answer.ids));
  // The harness gets valid UTF-8 (a character cut by max_tokens, stray bytes: one U+FFFD per ill-formed
  // sequence, engine/utf8.h) and copies that text back: the reply, hence its key, is the repaired text, or
  // the copy would be taken for a history edit. The recorded ids stay the upstream's bytes.
  if (!wire::is_valid_utf8(text)) text = wire::valid_utf8(text);
  // The harness's text ends before a matched stop string (the APIs' convention); the ids keep it.
  if (result.answer.finish_reason == "stop") {
    for (const std::string& stop : turn.stop) {
      if (!stop.empty() && text.ends_with(stop)) {
        completion.stop_sequence = stop;
        text.resize(text.size() - stop.size());
        break;
      }
    }
  }
  completion.reply = read_answer(text, turn,
                                 std::to_string(request.turn) + "_" + std::to_string(parts_.size()) +
                                     (t.index > 0 ? "_t" + std::to_string(t.index) : ""));
  completion.finish_reason = result.answer.finish_reason == "length" ? "length"
                             : completion.reply.tool_calls.empty()   ? "stop"
                                                                     : "tool_calls";
  completion.completion_tokens = static_cast<int64_t>(result.answer.ids.size());
  completion.cached_tokens = result.answer.cached_tokens;
  completion.ids = result.answer.ids;
  completion.logprobs = result.answer.logprobs;
  completion.top = most_likely(std::move(result.answer.top), turn.top_logprobs);
  Decision decision;
  decision.tokens = std::move(result.answer.ids);
  decision.logprobs = std::move(result.answer.logprobs);
  decision.finish_reason = result.answer.finish_reason;
  if (decision.finish_reason == "abort") {
    t.episode->submit(decision);  // recorded; the episode ends as aborted
    ++failures_;
    last_failure_ = "the LLM server aborted the generation";
    throw GatewayError(502, "upstream_error", "upstream_aborted", last_failure_);
  }
  const uint64_t key = reply_key(completion.reply);
  const uint64_t anthropic_key =
      completion.reply.tool_calls.empty() ? key : anthropic_reply_key(completion.reply);
  t.held = Held{std::move(decision), key, anthropic_key, completion};
  if (turn.prompt_ids) completion.prompt_ids = waiting_prompt_ids(t);
  return completion;
}

Completion GatewaySession::stored_answer(Thread& t, const ChatTurn& turn) {
  ++retries_;
  Completion out = t.held->completion;
  if (turn.prompt_ids) out.prompt_ids = waiting_prompt_ids(t);
  return out;
}

std::string GatewaySession::waiting_prompt_ids(Thread& t) {
  // The prompt the held answer was sampled from: the episode still waits on it, and its id text is the one
  // the upstream call wrote (t.ids_text keeps it), so this copies it.
  const Request& request = t.episode->request();
  return std::string(t.ids_text.text(request.prompt, t.generation, request.compactions));
}

void GatewaySession::reward(double reward, const std::string& status) {
  const std::optional<EpisodeStatus> parsed = parse_status(status);
  if (!parsed) {
    throw bad_request("bad_status",
                      "status " + quote(status) + " is not one of completed, truncated, aborted, failed",
                      "status");
  }
  // The calls in flight end first (their answers are recorded, and held as their threads' last turns).
  for (;;) {
    const auto busy =
        std::find_if(threads_.begin(), threads_.end(), [](const auto& t) { return t->in_call; });
    if (busy == threads_.end()) break;
    const std::shared_ptr<Thread> waited = *busy;  // (kept alive while the lock is released)
    wait_unlocked(waited->busy, nullptr);
  }
  if (ended_) {
    throw GatewayError(409, "invalid_request_error", "session_ended",
                       "session " + quote(id_) + " already has its reward", "session_id");
  }
  // The threads' parts, the least recently used first; the latest call's thread's (the rollout's last call)
  // last, with the reward. Threads without a window (a refused first call) have nothing to record.
  std::erase_if(threads_, [](const auto& t) { return !t->episode; });
  if (threads_.empty()) {
    threads_.push_back(std::make_shared<Thread>());
    last_ = threads_.front();
    throw GatewayError(409, "invalid_request_error", "session_empty",
                       "session " + quote(id_) + " has no call yet: nothing to reward", "session_id");
  }
  std::sort(threads_.begin(), threads_.end(),
            [](const auto& a, const auto& b) { return a->last_call < b->last_call; });
  while (threads_.size() > 1) retire(0, "the rollout ended");
  Thread& last = *threads_.front();
  last_ = threads_.front();
  if (!last.episode->done()) {
    if (last.held) {
      const bool truncated = *parsed == EpisodeStatus::kTruncated;
      last.env->stage_step({}, reward, !truncated, truncated);
      last.episode->submit(last.held->decision);
      last.held.reset();
    } else {
      Decision failed;
      failed.failed = true;
      failed.error = "the rollout ended while a request was pending (the last upstream call failed)";
      last.episode->submit(failed);
    }
  }
  parts_.push_back(last.episode->finish());
  part_threads_.push_back(last.index);
  clear_kept();  // no more calls: the memory goes
  Trajectory t = merge(std::move(parts_), part_threads_);
  parts_.clear();
  part_threads_.clear();
  t.reward = reward;
  if (t.status != *parsed) {
    t.status = *parsed;
    if (t.reason.empty()) t.reason = "as reported by the trainer";
  }
  t.env = "gateway";
  t.metadata["gateway_session"] = id_;
  t.metadata["history_edits"] = std::to_string(history_edits_);
  if (started_threads_ > 1) t.metadata["threads"] = std::to_string(started_threads_);
  t.metadata["upstream_calls"] = std::to_string(calls_);
  t.metadata["upstream_failures"] = std::to_string(failures_);
  if (!last_failure_.empty()) t.metadata["upstream_last_failure"] = last_failure_;
  t.metadata["retries_served"] = std::to_string(retries_);
  // The variables the session rendered with beyond the server's (its first call's chat_template_kwargs).
  if (!variant_->kwargs.empty()) t.metadata["chat_template_kwargs"] = variant_->kwargs;
  std::string cached;
  int64_t cached_total = 0;
  for (size_t i = 0; i < cached_tokens_.size(); ++i) {
    cached += (i ? "," : "") + std::to_string(cached_tokens_[i]);
    cached_total += cached_tokens_[i];
  }
  t.metadata["upstream_cached_tokens"] = cached;
  t.metadata["upstream_cached_tokens_total"] = std::to_string(cached_total);
  for (const auto& [key, value] : config_.metadata) t.metadata[key] = value;
  t.validate();
  trajectory_ = std::move(t);
  last.episode.reset();
  last.env = nullptr;
  ended_ = true;
}

nlohmann::json GatewaySession::state() const {
  nlohmann::json out;
  const Thread& t = *last_;
  out["session_id"] = id_;
  out["rollout_id"] = config_.rollout_id;
  out["ended"] = ended_;
  if (trajectory_) {
    out["status"] = std::string(episode_status_name(trajectory_->status));
    out["segments"] = trajectory_->segments.size();
    out["compactions"] = trajectory_->compactions;
    out["reward"] = trajectory_->reward;
  } else if (t.episode) {
    out["status"] = t.episode->done() ? std::string(episode_status_name(t.episode->status())) : "running";
    if (!t.episode->reason().empty()) out["reason"] = t.episode->reason();
    out["window_tokens"] = t.episode->context().tokens();
    out["compactions"] = t.episode->context().compactions();
    out["turns"] = t.episode->turn();
  } else {
    out["status"] = "empty";
  }
  out["messages"] = t.known.size();
  out["threads"] = started_threads_;
  out["thread"] = t.index;  // the one the last call went to (status, window_tokens... are its)
  out["calls_in_flight"] =
      std::count_if(threads_.begin(), threads_.end(), [](const auto& x) { return x->in_call; });
  out["history_edits"] = history_edits_;
  out["upstream_calls"] = calls_;
  out["upstream_failures"] = failures_;
  out["retries_served"] = retries_;
  if (!variant_->kwargs.empty()) out["chat_template_kwargs"] = nlohmann::json::parse(variant_->kwargs);
  out["budget"] = {
      {"capacity", config_.budget.capacity},       {"reserve", config_.budget.reserve},
      {"tail_k", config_.budget.tail_k},           {"per_turn_cap", config_.budget.per_turn_cap},
      {"summary_cap", config_.budget.summary_cap}, {"max_compactions", config_.budget.max_compactions}};
  return out;
}

}  // namespace crl::server::gateway
