#include "server/gateway/gateway_session.h"

#include <algorithm>
#include <chrono>

#include "engine/error.h"
#include "server/gateway/gateway_error.h"
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

// The decoder's key of the turn's tools when it computed one (kept_request.h), else computed here.
uint64_t tools_key_of(const ChatTurn& turn) {
  return turn.tools_key ? *turn.tools_key : tools_key(turn.tools);
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

void GatewaySession::make_episode(std::vector<TokenId> system, std::vector<TokenId> rest, bool opens_turn) {
  auto env = std::make_unique<HarnessEnv>();
  t_.env = env.get();
  EpisodeConfig episode;
  episode.budget = config_.budget;
  episode.seed = config_.seed;
  episode.group_index = config_.group_index;
  episode.sample_index = config_.sample_index;
  episode.rollout_id = config_.rollout_id;
  t_.episode = std::make_unique<Episode>(std::move(env), codec(), episode);
  t_.generation = ++generations_;
  t_.ids_text.invalidate();
  t_.env->stage_start(std::move(system), std::move(rest), opens_turn);
  Task task;
  task.id = "gateway/" + id_ + thread_suffix();  // (each thread its own sampling streams)
  t_.episode->start(task);
  t_.held.reset();
}

void GatewaySession::start_part(const ChatTurn& turn, std::vector<uint64_t> keys) {
  std::vector<TokenId> system, rest;
  t_.render_now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const FirstPrompt first =
      variant_->renderer.first_prompt(turn.messages, turn.tools, t_.render_now, system, rest, &t_.converted);
  t_.system_opened_user_turn = first.system_opens_user_turn;
  make_episode(std::move(system), std::move(rest), first.opens_turn);
  t_.known = std::move(keys);
  t_.tools_key = tools_key_of(turn);
  t_.window.reset();  // a new part renders the harness's list until its first rebuild
  t_.step_answers.clear();
}

void GatewaySession::note_rebuild(const ChatTurn& turn, const std::string& summary_text) {
  if (t_.episode->done()) return;  // truncated: the rebuilt window did not fit
  const std::vector<Message>& messages = turn.messages;
  // The window keeps the newest k steps (k = tail_k -> 0): from the oldest kept step's answer on; none
  // kept: from the answer to come, after everything the harness has sent.
  const auto kept = static_cast<size_t>(t_.episode->context().steps_in_window());
  const size_t from = kept > 0 && kept <= t_.step_answers.size()
                          ? t_.step_answers[t_.step_answers.size() - kept]
                          : messages.size();
  WindowConversation window;
  if (!messages.empty() && messages[0].role == MessageRole::kSystem) window.messages.push_back(messages[0]);
  // The resume turn as the window holds it: the preface and the summary's text (envs/codec.h).
  window.messages.push_back(Message{MessageRole::kUser, TextPrompts{}.resume_preface + summary_text, {}, {}});
  window.lead = window.messages.size();
  window.from = from;
  window.messages.insert(window.messages.end(), messages.begin() + static_cast<ptrdiff_t>(from),
                         messages.end());
  t_.window = std::move(window);
  // Only the window's steps can be kept by the next rebuild: the list stays as long as the window.
  t_.step_answers.erase(t_.step_answers.begin(), t_.step_answers.end() - static_cast<ptrdiff_t>(std::min(
                                                                             kept, t_.step_answers.size())));
}

void GatewaySession::start_text_part(const std::string& prompt) {
  t_.system_opened_user_turn = false;
  make_episode({}, variant_->renderer.text(prompt));
  known_text_ = prompt;
}

void GatewaySession::close_part(const std::string& why) {
  if (!t_.episode->done()) {
    if (t_.held) {
      t_.env->stage_step({}, 0.0, true, false);
      t_.episode->submit(t_.held->decision);
    } else {
      Decision failed;
      failed.failed = true;
      failed.error = why;
      t_.episode->submit(failed);
    }
  }
  t_.held.reset();
  Trajectory part = t_.episode->finish();
  part.metadata["part_end"] = why;
  parts_.push_back(std::move(part));
  part_threads_.push_back(t_.index);
  t_.episode.reset();
  t_.env = nullptr;
}

void GatewaySession::throw_done() const {
  throw GatewayError(400, "invalid_request_error", "context_length_exceeded",
                     "session " + quote(id_) + " has no room left: " + t_.episode->reason() +
                         " (the rollout is " + std::string(episode_status_name(t_.episode->status())) +
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

Completion GatewaySession::complete(const ChatTurn& turn) {
  check_open(true);
  const std::string& prompt = *turn.prompt;
  if (prompt.empty()) throw bad_request("empty_prompt", "prompt is empty: give the text so far", "prompt");
  if (!t_.episode) {
    start_text_part(prompt);
    return drive(turn);
  }
  if (t_.episode->done()) throw_done();
  if (t_.held && prompt == known_text_) return stored_answer(turn);  // a retry: nothing sampled twice
  if (t_.held) {
    const std::string& answer = t_.held->completion.reply.content;
    if (prompt.size() >= known_text_.size() + answer.size() && prompt.starts_with(known_text_) &&
        prompt.compare(known_text_.size(), answer.size(), answer) == 0) {
      const std::string_view fresh = std::string_view(prompt).substr(known_text_.size() + answer.size());
      t_.env->stage_step(variant_->renderer.text(fresh), 0.0, false, false);
      const Decision decision = std::move(t_.held->decision);
      t_.held.reset();
      t_.episode->submit(decision);
      known_text_ = prompt;
      return drive(turn);
    }
  }
  if (!t_.held && prompt == known_text_) return drive(turn);  // after a failed upstream call: send it again
  close_part("the harness rewrote its history");
  ++history_edits_;
  start_text_part(prompt);
  return drive(turn);
}

KeptRequest& GatewaySession::kept_request_for(std::string_view body) {
  // The most recently used body of the same conversation (the last one, for a one-conversation harness).
  size_t best = kept_.size();
  for (size_t i = kept_.size(); i-- > 0;) {
    if (kept_[i].same_conversation(body)) {
      best = i;
      break;
    }
  }
  if (best == kept_.size()) {  // another conversation: an unused body, or the least recently used one
    best = 0;
    for (size_t i = 0; i < kept_.size(); ++i) {
      if (kept_[i].elements() == 0) best = i;
    }
    if (kept_[best].elements() != 0 && kept_.size() < kKeptBodies) {
      kept_.emplace_back();
      best = kept_.size() - 1;
    }
  }
  std::rotate(kept_.begin() + static_cast<ptrdiff_t>(best), kept_.begin() + static_cast<ptrdiff_t>(best) + 1,
              kept_.end());
  return kept_.back();
}

std::string GatewaySession::thread_suffix() const {
  return t_.index > 0 ? "/t" + std::to_string(t_.index) : "";
}

bool GatewaySession::select_thread(const ChatTurn& turn, const std::vector<uint64_t>& keys) {
  if (!t_.episode && parked_.empty()) return false;  // the session's first call (thread 0)
  const uint64_t tools = tools_key_of(turn);
  // (A thread without a window, its first call refused, is continued by nothing: it holds no messages.)
  const auto continued = [&](const Thread& t) {
    return t.episode && t.tools_key == tools && keys.size() >= t.known.size() &&
           std::equal(t.known.begin(), t.known.end(), keys.begin());
  };
  if (continued(t_)) return true;  // the active thread (every call of a one-conversation harness)
  const auto activate = [&](size_t i) {
    std::swap(t_, parked_[i]);
    if (!parked_[i].episode) parked_.erase(parked_.begin() + static_cast<ptrdiff_t>(i));
  };
  size_t best = parked_.size();
  for (size_t i = 0; i < parked_.size(); ++i) {
    if (continued(parked_[i]) &&
        (best == parked_.size() || parked_[i].known.size() > parked_[best].known.size()))
      best = i;
  }
  if (best < parked_.size()) {
    activate(best);
    return true;
  }
  // An edit of a thread: the call keeps its first two messages (or its one), as a harness that rewrites
  // its history keeps its system prompt and task; another conversation differs in one of them (a
  // sub-agent's system prompt, or its task under the same one).
  const auto shared = [&](const Thread& t) {
    const size_t lead = std::min<size_t>(2, t.known.size());
    return lead > 0 && keys.size() >= lead &&
           std::equal(t.known.begin(), t.known.begin() + lead, keys.begin());
  };
  if (shared(t_)) return false;
  for (size_t i = 0; i < parked_.size(); ++i) {
    if (shared(parked_[i])) {
      activate(i);
      return false;
    }
  }
  // A new conversation: a new thread; the active one is parked, and past kMaxThreads the least recently
  // used one's part is closed (its held answer recorded as its last turn).
  if (t_.episode) {  // (an active thread without a window, its first call refused, is reused)
    parked_.push_back(std::move(t_));
    t_ = Thread{};
    t_.index = threads_++;
  }
  if (parked_.size() + 1 > kMaxThreads) {
    // The one with the fewest messages, the least recently used of those: one-call conversations (a
    // harness's side calls) go before a long one that waits (a main agent while its sub-agent works),
    // whose history may no longer fit a new window.
    size_t retired = 0;
    for (size_t i = 1; i < parked_.size(); ++i) {
      const Thread &a = parked_[i], &b = parked_[retired];
      if (std::pair(a.known.size(), a.last_call) < std::pair(b.known.size(), b.last_call)) retired = i;
    }
    retire_parked(retired, "more threads than the session keeps (" + std::to_string(kMaxThreads) + ")");
  }
  return false;
}

void GatewaySession::retire_parked(size_t i, const std::string& why) {
  std::swap(t_, parked_[i]);
  close_part(why);
  std::swap(t_, parked_[i]);
  parked_.erase(parked_.begin() + static_cast<ptrdiff_t>(i));
}

Completion GatewaySession::chat(const ChatTurn& turn) {
  if (turn.prompt) return complete(turn);
  check_open(false);
  if (turn.messages.empty())
    throw bad_request("empty_messages", "messages is empty: give at least one", "messages");
  std::vector<uint64_t> keys = turn.keys;
  if (keys.size() != turn.messages.size()) {
    keys.resize(turn.messages.size());
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = message_key(turn.messages[i]);
  }
  const bool same_prefix = select_thread(turn, keys);
  t_.last_call = calls_;
  if (!t_.episode) {
    start_part(turn, std::move(keys));
    return drive(turn);
  }
  if (t_.episode->done()) throw_done();
  const size_t n0 = t_.known.size();
  if (same_prefix) {
    if (t_.held && keys.size() == n0) return stored_answer(turn);  // a retry: nothing sampled twice
    if (t_.held && (keys[n0] == t_.held->key || keys[n0] == t_.held->anthropic_key)) {
      std::span<const Message> conversation = turn.messages;
      size_t answer = n0;
      if (t_.window) {
        // The window's conversation: its messages through the harness's n0 - 1 (what the last answered
        // call sent; a refused call's messages are cut off again), then the answer and the new messages.
        t_.window->messages.resize(t_.window->lead + (n0 - t_.window->from));
        t_.window->messages.insert(t_.window->messages.end(),
                                   turn.messages.begin() + static_cast<ptrdiff_t>(n0), turn.messages.end());
        conversation = t_.window->messages;
        answer = n0 - t_.window->from + t_.window->lead;
      }
      TurnsAfterAnswer turns = variant_->renderer.observation(t_.held->decision.tokens, conversation, answer,
                                                              turn.tools, t_.render_now, &t_.converted);
      t_.env->stage_step(std::move(turns.ids), 0.0, false, false, turns.opens_turn);
      const Decision decision = std::move(t_.held->decision);
      t_.held.reset();
      t_.step_answers.push_back(n0);
      t_.episode->submit(decision);
      t_.known = std::move(keys);
      return drive(turn);
    }
    if (!t_.held && keys.size() == n0) return drive(turn);  // after a failed upstream call: send it again
  }
  close_part("the harness rewrote its history");
  ++history_edits_;
  start_part(turn, std::move(keys));
  return drive(turn);
}

UpstreamResult GatewaySession::call_upstream(const Request& request, const ChatTurn& turn,
                                             int64_t max_new_tokens) {
  UpstreamCall call;
  call.prompt = &request.prompt;
  call.prompt_ids_json = t_.ids_text.text(request.prompt, t_.generation, request.compactions);
  call.max_new_tokens = max_new_tokens;
  call.sampling_seed = llm::sampling_seed(request.stream);
  call.rid =
      id_ + thread_suffix() + "/" + role_name(request.role) + "/" + std::to_string(request.stream.ordinal);
  call.routing_key = turn.routing_key.empty() ? id_ : turn.routing_key;
  call.sampling = config_.sampling;
  call.keepalive = turn.keepalive;
  if (turn.temperature) call.sampling.temperature = *turn.temperature;
  if (turn.top_p) call.sampling.top_p = *turn.top_p;
  if (turn.top_k) call.sampling.top_k = *turn.top_k;
  if (request.role == Role::kExecute) {
    call.sampling.stop = turn.stop;  // a summary is never cut short
    call.sampling.top_logprobs = turn.top_logprobs;
    call.sampling.json_schema = turn.json_schema;  // a summary is free text
  }
  ++calls_;
  UpstreamResult result = shared_.upstream->generate(call);
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

Completion GatewaySession::drive(const ChatTurn& turn) {
  // The summary the trigger asked for (window + instruction), from the same upstream; its answer closes a
  // summary segment and the episode rebuilds the window.
  while (!t_.episode->done() && t_.episode->request().role == Role::kSummarize) {
    const Request& request = t_.episode->request();
    UpstreamResult result = call_upstream(request, turn, request.max_new_tokens);
    if (!result.ok) fail_call(result);
    Decision summary;
    summary.tokens = std::move(result.answer.ids);
    summary.logprobs = std::move(result.answer.logprobs);
    summary.finish_reason = result.answer.finish_reason == "abort" ? "length" : result.answer.finish_reason;
    const bool render = !*plain_ && variant_->renderer.renders_template();
    const std::string summary_text = render ? codec()->decode(codec()->summary_body(summary.tokens)) : "";
    t_.episode->submit(summary);
    if (render) note_rebuild(turn, summary_text);
    if (ServerMetrics* m = shared_.metrics) m->compactions->add();
  }
  if (t_.episode->done()) throw_done();
  const Request& request = t_.episode->request();
  // Clamped to what is left of the budget (the episode's) and to the harness's own limit.
  const int64_t max_new =
      turn.max_tokens > 0 ? std::min(turn.max_tokens, request.max_new_tokens) : request.max_new_tokens;
  UpstreamResult result = call_upstream(request, turn, max_new);
  if (!result.ok) fail_call(result);
  // (A harmony answer is read whole: its messages' headers say which text is content and which a call.)
  std::string text = codec()->decode(shared_.tool_format == ToolCallFormat::kHarmony && !*plain_
                                         ? std::span<const TokenId>(result.answer.ids)
                                         : codec()->summary_body(result.answer.ids));
  // The harness gets valid UTF-8 (a character cut by max_tokens, stray bytes: one U+FFFD per ill-formed
  // sequence, engine/utf8.h) and copies that text back: the reply, hence its key, is the repaired text, or
  // the copy would be taken for a history edit. The recorded ids stay the upstream's bytes.
  if (!wire::is_valid_utf8(text)) text = wire::valid_utf8(text);
  Completion completion;
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
  completion.id = std::string(*plain_ ? "cmpl-" : "chatcmpl-") + id_ + "-" + std::to_string(request.turn) +
                  "-" + std::to_string(parts_.size()) + (t_.index > 0 ? "-t" + std::to_string(t_.index) : "");
  completion.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  completion.reply = read_answer(text, turn,
                                 std::to_string(request.turn) + "_" + std::to_string(parts_.size()) +
                                     (t_.index > 0 ? "_t" + std::to_string(t_.index) : ""));
  completion.finish_reason = result.answer.finish_reason == "length" ? "length"
                             : completion.reply.tool_calls.empty()   ? "stop"
                                                                     : "tool_calls";
  completion.prompt_tokens = request.prompt.size();
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
    t_.episode->submit(decision);  // recorded; the episode ends as aborted
    ++failures_;
    last_failure_ = "the LLM server aborted the generation";
    throw GatewayError(502, "upstream_error", "upstream_aborted", last_failure_);
  }
  const uint64_t key = reply_key(completion.reply);
  const uint64_t anthropic_key =
      completion.reply.tool_calls.empty() ? key : anthropic_reply_key(completion.reply);
  t_.held = Held{std::move(decision), key, anthropic_key, completion};
  if (turn.prompt_ids) completion.prompt_ids = waiting_prompt_ids();
  return completion;
}

Completion GatewaySession::stored_answer(const ChatTurn& turn) {
  ++retries_;
  Completion out = t_.held->completion;
  if (turn.prompt_ids) out.prompt_ids = waiting_prompt_ids();
  return out;
}

std::string GatewaySession::waiting_prompt_ids() {
  // The prompt the held answer was sampled from: the episode still waits on it, and its id text is the one
  // the upstream call wrote (t_.ids_text keeps it), so this copies it.
  const Request& request = t_.episode->request();
  return std::string(t_.ids_text.text(request.prompt, t_.generation, request.compactions));
}

void GatewaySession::reward(double reward, const std::string& status) {
  const std::optional<EpisodeStatus> parsed = parse_status(status);
  if (!parsed) {
    throw bad_request("bad_status",
                      "status " + quote(status) + " is not one of completed, truncated, aborted, failed",
                      "status");
  }
  if (ended_) {
    throw GatewayError(409, "invalid_request_error", "session_ended",
                       "session " + quote(id_) + " already has its reward", "session_id");
  }
  if (!t_.episode) {
    throw GatewayError(409, "invalid_request_error", "session_empty",
                       "session " + quote(id_) + " has no call yet: nothing to reward", "session_id");
  }
  // The other threads' parts first, the least recently used first; the active thread's (the rollout's last
  // call) last, with the reward.
  std::sort(parked_.begin(), parked_.end(),
            [](const Thread& a, const Thread& b) { return a.last_call < b.last_call; });
  while (!parked_.empty()) retire_parked(0, "the rollout ended");
  if (!t_.episode->done()) {
    if (t_.held) {
      const bool truncated = *parsed == EpisodeStatus::kTruncated;
      t_.env->stage_step({}, reward, !truncated, truncated);
      t_.episode->submit(t_.held->decision);
      t_.held.reset();
    } else {
      Decision failed;
      failed.failed = true;
      failed.error = "the rollout ended while a request was pending (the last upstream call failed)";
      t_.episode->submit(failed);
    }
  }
  parts_.push_back(t_.episode->finish());
  part_threads_.push_back(t_.index);
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
  if (threads_ > 1) t.metadata["threads"] = std::to_string(threads_);
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
  t_.episode.reset();
  t_.env = nullptr;
  ended_ = true;
}

nlohmann::json GatewaySession::state() const {
  nlohmann::json out;
  out["session_id"] = id_;
  out["rollout_id"] = config_.rollout_id;
  out["ended"] = ended_;
  if (trajectory_) {
    out["status"] = std::string(episode_status_name(trajectory_->status));
    out["segments"] = trajectory_->segments.size();
    out["compactions"] = trajectory_->compactions;
    out["reward"] = trajectory_->reward;
  } else if (t_.episode) {
    out["status"] = t_.episode->done() ? std::string(episode_status_name(t_.episode->status())) : "running";
    if (!t_.episode->reason().empty()) out["reason"] = t_.episode->reason();
    out["window_tokens"] = t_.episode->context().tokens();
    out["compactions"] = t_.episode->context().compactions();
    out["turns"] = t_.episode->turn();
  } else {
    out["status"] = "empty";
  }
  out["messages"] = t_.known.size();
  out["threads"] = threads_;
  out["thread"] = t_.index;  // the one the last call went to (status, window_tokens... are its)
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
