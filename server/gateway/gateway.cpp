#include "server/gateway/gateway.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "engine/json_view.h"
#include "engine/sse.h"
#include "engine/tokenizer.h"
#include "engine/trajectory_io.h"
#include "server/gateway/anthropic_codec.h"
#include "server/gateway/call_answers.h"
#include "server/gateway/live_answer.h"
#include "server/gateway/openai_answer.h"
#include "server/gateway/openai_codec.h"
#include "server/gateway/responses_codec.h"
#include "server/gateway/stream_keepalive.h"
#include "server/gateway/tool_choice.h"
#include "server/session_table.h"
#include "wire/utf8.h"
#include "wire/wire_codec.h"

namespace crl::server::gateway {

using json = nlohmann::json;

namespace {

// A forced tool_choice made the grammar of the call's answer (tool_choice.h), before the session sees the
// call: refused as a whole (nothing recorded) when it cannot be.
void constrain_to_calls(ChatTurn& turn, ToolCallFormat format) {
  if (!turn.tool_choice.forced()) return;
  if (format == ToolCallFormat::kHarmony) {
    throw bad_request("unsupported_field",
                      "tool_choice required or a named function is not served with the harmony format "
                      "(gpt-oss): its answers are channel messages, which a JSON grammar would break",
                      "tool_choice");
  }
  if (!turn.json_schema.empty()) {
    throw bad_request("bad_field",
                      "a forced tool_choice and response_format (or text.format) cannot both constrain "
                      "one answer",
                      "tool_choice");
  }
  turn.json_schema = forced_calls_schema(turn.tool_choice, turn.tools);
}

json parse_body(std::string_view body) {
  json out;
  try {
    out = read_json(body, "the request body");
  } catch (const JsonError& e) {
    throw bad_request(std::string(e.code()), e.what(), e.field());
  }
  if (!out.is_object()) throw bad_request("bad_json", "the request body must be a JSON object");
  return out;
}

void check_id(std::string_view id) {
  if (!valid_session_id(id)) {
    throw bad_request("bad_session_id",
                      "session id " + quote(text_prefix(id)) + " is not 1-128 characters of [A-Za-z0-9._:-]",
                      "session_id");
  }
}

int64_t integer_field(const json& object, const char* key, int64_t fallback, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_integer())
    throw bad_request("bad_field", where + key + " must be an integer", where + key);
  return it->get<int64_t>();
}

}  // namespace

bool valid_session_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Gateway::Gateway(GatewayOptions options, ServerMetrics* metrics) : options_(std::move(options)) {
  options_.budget.validate("crl serve budget options");
  std::shared_ptr<const Tokenizer> tokenizer = make_tokenizer(options_.tokenizer);
  // chatml | plain | PATH.jinja | PATH/tokenizer_config.json: a real model's template renders the prompts
  // (template_render.h); its per-turn strings write the summary request and the resume turn.
  const ChatTemplate chat =
      load_turn_template(options_.chat_template, "--chat-template", options_.template_variables);
  shared_.tool_format = resolve_tool_call_format(options_.tool_call_parser, chat);
  // gpt-oss (harmony): an answer ends on <|call|> or <|return|>; <|end|>, the template's end of turn,
  // closes its analysis message and the next message follows (tool_call_format.h).
  std::optional<HarmonyTokens> harmony;
  std::vector<TokenId> answer_ends;
  std::vector<std::string> guarded;  // message text never writes these (template_render.h)
  if (shared_.tool_format == ToolCallFormat::kHarmony) {
    const auto special = [&](const char* text) {
      const std::optional<TokenId> id = tokenizer->special_token(text);
      if (!id) {
        throw Error("option --tokenizer", "",
                    "tokenizer " + quote(tokenizer->name()) + " has no special token " + quote(text) +
                        ", which the harmony chat template " + quote(chat.name) + " writes");
      }
      return *id;
    };
    answer_ends = {special("<|call|>"), special("<|return|>")};
    harmony = HarmonyTokens{special("<|message|>"), {special("<|end|>"), answer_ends[0], answer_ends[1]}};
    guarded = {"<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"};
    special("<|channel|>");  // (the other guarded strings were looked up above)
    special("<|constrain|>");
  }
  shared_.reasoning_format = resolve_reasoning_format(options_.reasoning_parser, *tokenizer);
  shared_.templates = std::make_unique<TemplateVariants>(tokenizer, chat, answer_ends, guarded, harmony);
  // Plain completions: the window is the harness's text with no turn text around it; the summary instruction
  // and resume preface are plain paragraphs; the end-of-turn token still stops a summary.
  ChatTemplate text_only;
  text_only.name = chat.name + "/completion";
  text_only.user_prefix = "\n\n";
  text_only.user_suffix = "\n\n";
  text_only.end_of_turn = chat.end_of_turn;
  shared_.completion_codec = make_harness_codec(make_text_codec(tokenizer, TextPrompts{}, text_only));
  if (options_.upstream.vocab_size == 0) options_.upstream.vocab_size = tokenizer->vocab_size();
  if (options_.sampling.stop_token_ids.empty()) {
    options_.sampling.stop_token_ids =
        answer_ends.empty() ? std::vector<TokenId>{renderer().end_of_turn()} : answer_ends;
  }
  shared_.upstream = std::make_unique<Upstream>(options_.upstream);
  shared_.metrics = metrics;
  shared_.model = options_.model;
  started_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
}

Gateway::~Gateway() = default;

size_t Gateway::sessions() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

void Gateway::cancel_upstream() {
  if (shared_.upstream) shared_.upstream->cancel();
}

void Gateway::leave_io_context() {
  if (shared_.upstream) shared_.upstream->leave_io_context();
}

size_t Gateway::reap_idle() {
  std::vector<std::shared_ptr<GatewaySession>> reaped;
  {
    std::lock_guard lock(mutex_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      GatewaySession& s = *it->second;
      // (a session whose call waits for the upstream is not idle, though its lock is free then)
      if (s.idle_seconds() > options_.idle_timeout_s && s.mutex.try_lock()) {
        const bool busy = s.busy();
        if (!busy) s.reaped = true;
        s.mutex.unlock();
        if (busy) {
          ++it;
          continue;
        }
        reaped.push_back(std::move(it->second));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return reaped.size();  // destroyed here, outside the table's lock
}

namespace {
// Whether a call's body asks for a stream (a top-level "stream": true), read whole; a body that does not
// read is not (its decoding under the lock says why).
bool asks_for_stream(std::string_view body) {
  try {
    const JsonDocument document = JsonDocument::parse(body, "body");
    const JsonView stream = document.root().is_object() ? document.root().find("stream") : JsonView();
    return stream.is_bool() && stream.boolean();
  } catch (const std::exception&) {
    return false;
  }
}

// Locks a session for one call; a session the reaper removed meanwhile is a 404, and the call's end counts
// as its last use.
class SessionLock {
 public:
  explicit SessionLock(GatewaySession& session) : SessionLock(session, nullptr, [] { return false; }) {}
  // A streamed call that finds the session busy (a harness's retry behind its own call in flight) keeps
  // its stream alive while it waits (stream_keepalive.h): `streamed` says whether the call asked for a
  // stream, asked only then (a session's body is otherwise decoded under its lock, against the kept body).
  // (A template, not std::function: a call pays no allocation for its lambda.)
  template <class Streamed>
  SessionLock(GatewaySession& session, StreamKeepalive* keepalive, const Streamed& streamed)
      : session_(session), lock_(acquire(session.mutex, keepalive, streamed), std::adopt_lock) {
    if (session_.reaped) {
      throw GatewayError(404, "not_found_error", "unknown_session",
                         "session " + quote(session_.id()) +
                             " was removed meanwhile (by the idle reaper, or as its refused first call's)",
                         "session_id");
    }
  }
  ~SessionLock() { session_.touch(); }

 private:
  template <class Streamed>
  static FiberMutex& acquire(FiberMutex& mutex, StreamKeepalive* keepalive, const Streamed& streamed) {
    if (mutex.try_lock()) return mutex;
    if (keepalive != nullptr && streamed()) {
      keepalive->want();
      mutex.lock(*keepalive);
    } else {
      mutex.lock();
    }
    return mutex;
  }

  GatewaySession& session_;
  std::lock_guard<FiberMutex> lock_;
};
}  // namespace

std::shared_ptr<GatewaySession> Gateway::find(const std::string& id) const {
  check_id(id);
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(id);
  if (it == sessions_.end())
    throw GatewayError(404, "not_found_error", "unknown_session", "no session " + quote(id), "session_id");
  return it->second;
}

std::shared_ptr<GatewaySession> Gateway::existing(const std::string& id) const {
  check_id(id);
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

std::shared_ptr<GatewaySession> Gateway::find_or_create(const std::string& id, const std::string& kwargs,
                                                        bool* created) {
  if (created) *created = false;
  if (std::shared_ptr<GatewaySession> session = existing(id)) return session;
  // (outside the table's lock: a new variant renders the template; a refused one creates no session)
  std::shared_ptr<const TemplateVariant> variant = shared_.templates->for_session(kwargs);
  std::lock_guard lock(mutex_);
  auto& slot = sessions_[id];
  if (!slot) {
    if (sessions_.size() > options_.max_sessions) {
      sessions_.erase(id);
      throw GatewayError(429, "rate_limit_error", "too_many_sessions",
                         "the gateway holds its limit of " + std::to_string(options_.max_sessions) +
                             " sessions; end some (reward, DELETE) or retry later")
          .with_retry_after(1);
    }
    SessionConfig config;
    config.budget = options_.budget;
    config.sampling = options_.sampling;
    slot = std::make_shared<GatewaySession>(id, shared_, config, std::move(variant));
    if (created) *created = true;
  }
  return slot;
}

// A session a call made, whose call is refused before anything starts it (a template that refuses the
// messages, an empty prompt), is removed again: refused calls leave nothing behind, so a trainer's malformed
// calls at scale cannot fill the session table. Declared after the call's SessionLock, so it runs first.
class Gateway::ForgetIfRefused {
 public:
  ForgetIfRefused(Gateway& gateway, const std::string& id, GatewaySession& session, bool created)
      : gateway_(gateway), id_(id), session_(session), created_(created) {}
  ForgetIfRefused(const ForgetIfRefused&) = delete;
  ForgetIfRefused& operator=(const ForgetIfRefused&) = delete;
  ~ForgetIfRefused() {
    if (created_ && std::uncaught_exceptions() > exceptions_) gateway_.forget_unstarted(id_, session_);
  }

 private:
  Gateway& gateway_;
  const std::string& id_;
  GatewaySession& session_;
  bool created_;
  int exceptions_ = std::uncaught_exceptions();
};

void Gateway::forget_unstarted(const std::string& id, GatewaySession& session) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.get() != &session || session.started()) return;
  session.reaped = true;  // (the caller holds its lock) a call that waited for it answers 404
  sessions_.erase(it);
}

HttpAnswer Gateway::create(const HttpCall& call) {
  const json body = parse_body(call.body);
  SessionConfig config;
  config.budget = options_.budget;
  config.sampling = options_.sampling;
  std::string id;
  if (const auto it = body.find("session_id"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) throw bad_request("bad_field", "session_id must be a string", "session_id");
    id = it->get<std::string>();
  } else {
    id = "gw-" + random_episode_id().substr(3);  // 128 bits from getrandom(2)
  }
  check_id(id);
  if (const auto b = body.find("budget"); b != body.end() && !b->is_null()) {
    if (!b->is_object()) throw bad_request("bad_budget", "budget must be an object", "budget");
    Budget& budget = config.budget;
    budget.capacity = integer_field(*b, "capacity", budget.capacity, "budget.");
    budget.reserve = integer_field(*b, "reserve", budget.reserve, "budget.");
    budget.tail_k = static_cast<int>(integer_field(*b, "tail_k", budget.tail_k, "budget."));
    budget.per_turn_cap = integer_field(*b, "per_turn_cap", budget.per_turn_cap, "budget.");
    budget.summary_cap = integer_field(*b, "summary_cap", budget.summary_cap, "budget.");
    budget.max_compactions =
        static_cast<int>(integer_field(*b, "max_compactions", budget.max_compactions, "budget."));
    try {
      budget.validate("budget");
    } catch (const Error& e) {
      throw bad_request("bad_budget", e.what(), "budget");
    }
    if (options_.upstream_context > 0 && budget.capacity > options_.upstream_context) {
      throw bad_request("bad_budget",
                        "budget.capacity " + std::to_string(budget.capacity) +
                            " is more than the LLM server's context (max_model_len " +
                            std::to_string(options_.upstream_context) + "): a window that grew past it " +
                            "would fail at the server",
                        "budget.capacity");
    }
  }
  if (const auto s = body.find("sampling"); s != body.end() && s->is_object()) {
    if (s->contains("temperature") && (*s)["temperature"].is_number())
      config.sampling.temperature = (*s)["temperature"].get<double>();
    if (s->contains("top_p") && (*s)["top_p"].is_number())
      config.sampling.top_p = (*s)["top_p"].get<double>();
    if (s->contains("top_k") && (*s)["top_k"].is_number_integer())
      config.sampling.top_k = (*s)["top_k"].get<int>();
  }
  config.seed = static_cast<uint64_t>(integer_field(body, "seed", 0, ""));
  config.group_index = integer_field(body, "group_index", 0, "");
  config.sample_index = integer_field(body, "sample_index", 0, "");
  if (const auto r = body.find("rollout_id"); r != body.end() && r->is_string())
    config.rollout_id = r->get<std::string>();
  if (const auto m = body.find("metadata"); m != body.end() && !m->is_null()) {
    if (!m->is_object()) throw bad_request("bad_field", "metadata must be an object of strings", "metadata");
    for (const auto& [key, value] : m->items()) {
      if (!value.is_string())
        throw bad_request("bad_field", "metadata." + key + " must be a string", "metadata." + key);
      config.metadata[key] = value.get<std::string>();
    }
  }
  // The session's template variables, as a first call's chat_template_kwargs would set them.
  std::string kwargs;
  if (const auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
    if (!k->is_object())
      throw bad_request("bad_field", "chat_template_kwargs must be an object of the template's variables",
                        "chat_template_kwargs");
    if (!k->empty()) kwargs = k->dump();
  }
  std::shared_ptr<const TemplateVariant> variant = shared_.templates->for_session(kwargs);
  std::lock_guard lock(mutex_);
  if (sessions_.count(id))
    throw GatewayError(409, "invalid_request_error", "session_exists", "session " + quote(id) + " exists",
                       "session_id");
  if (sessions_.size() >= options_.max_sessions) {
    throw GatewayError(
        429, "rate_limit_error", "too_many_sessions",
        "the gateway holds its limit of " + std::to_string(options_.max_sessions) + " sessions")
        .with_retry_after(1);
  }
  // (without kwargs, the session's first chat call may still give them)
  auto session = std::make_shared<GatewaySession>(id, shared_, config, std::move(variant), !kwargs.empty());
  sessions_[id] = session;
  return json_answer(200, session->state().dump());
}

namespace {
// The messages a chained Responses turn borrowed from its session's chain go back to it when the turn is
// done with them (record() took them after a success: then there is nothing to give back).
struct ChainLoan {
  ResponseChain& chain;
  ChatTurn& turn;
  ~ChainLoan() { chain.take_back(turn); }
};

// Continues the session's response chain from `previous` into `turn` (ResponseChain::continue_from); a
// line lent to another call in flight is waited for (without the session's lock).
void continue_chain(GatewaySession& session, const std::string& previous, size_t lead, ChatTurn& turn) {
  while (!session.ended()) {  // (ended while it waited: its call is refused as session_ended)
    try {
      session.response_chain().continue_from(previous, lead, turn);
      return;
    } catch (const ResponseChain::Lent& lent) {
      session.wait_unlocked(*lent.loan, turn.keepalive);
    }
  }
}

// A streamed call gets the call's keep-alive (stream_keepalive.h) for its upstream waits.
void keep_alive_if_streamed(const HttpCall& call, CallRequest& request) {
  if (!request.stream || call.keepalive == nullptr) return;
  call.keepalive->want();
  if (!request.model.empty()) call.keepalive->set_model(request.model);
  request.turn.keepalive = call.keepalive;
}
}  // namespace

void Gateway::live_if_streamed(const HttpCall& call, CallRequest& request, LiveAnswer* live) const {
  if (live == nullptr || !request.stream || !options_.stream_upstream || call.keepalive == nullptr ||
      !call.keepalive->can_send())
    return;
  if (request.logprobs.on || request.return_token_ids || request.turn.top_logprobs > 0) return;
  request.turn.live = live;
}

Completion Gateway::kept_call(const HttpCall& call, const std::string& id, KeptDecoder decode,
                              CallRequest& request, bool responses_api, LiveAnswer* live) {
  // A session's body is decoded under its lock, against the body it kept (kept_request.h); a call on an
  // unknown id decodes first, so that a malformed one creates no session.
  std::shared_ptr<GatewaySession> session = existing(id);
  KeptRequest first;
  const bool decoded = !session;
  bool created = false;
  // What the request asks of the template and of the answer's form, checked before the session sees it.
  // (A new session takes its template variables from the call's chat_template_kwargs; a later call's must
  // change nothing the session's template writes: template_variants.h.)
  if (decoded) {
    request = decode(call.body, first);
    constrain_to_calls(request.turn, shared_.tool_format);
    // A new session has no response to continue: refused (by an empty chain) before it is created.
    if (responses_api && !request.previous_response_id.empty())
      ResponseChain().continue_from(request.previous_response_id, 0, request.turn);
    session = find_or_create(id, request.turn.template_kwargs, &created);
    session->variant().check.check(request.turn.template_kwargs);  // (another call may have created it)
  }
  SessionLock lock(*session, call.keepalive,
                   [&] { return decoded ? request.stream : asks_for_stream(call.body); });
  const ForgetIfRefused forget_if_refused(*this, id, *session, created);  // (released before the lock)
  KeptRequest& kept = session->kept_request_for(call.body);
  if (decoded)
    kept = std::move(first);
  else
    request = decode(call.body, kept);
  request.turn.routing_key = std::string(call.routing_key);
  keep_alive_if_streamed(call, request);
  live_if_streamed(call, request, live);
  // The messages go back to the session's kept body whatever the call's outcome.
  struct GiveBack {
    GatewaySession& session;
    KeptRequest& kept;
    ChatTurn& turn;
    ~GiveBack() { session.return_kept(kept, turn); }
  } give_back{*session, kept, request.turn};
  if (!decoded) {
    // A session POST /v1/sessions made without kwargs takes its first call's.
    if (session->variant_open() && !request.turn.template_kwargs.empty())
      session->set_variant(shared_.templates->for_session(request.turn.template_kwargs));
    session->variant().check.check(request.turn.template_kwargs);
    constrain_to_calls(request.turn, shared_.tool_format);
  }
  if (!responses_api) return session->chat(request.turn);
  // The Responses API: a call that names the response it follows gets that conversation in front of its
  // input, and every answer becomes the conversation's newest response (response_chain.h).
  ResponseChain& chain = session->response_chain();
  // (an ended session keeps no chain: its call is refused as session_ended, below, not as an unknown id)
  if (!request.previous_response_id.empty() && !session->ended())
    continue_chain(*session, request.previous_response_id, request.instruction_messages, request.turn);
  const ChainLoan loan{chain, request.turn};  // (a failed call's messages go back before give_back runs)
  Completion completion = session->chat(request.turn);
  chain.record(response_id(completion), request.instruction_messages, request.turn, completion.reply);
  return completion;
}

namespace {
// The chunks of an OpenAI stream sent as its answer is sampled (live_answer.h).
LiveAnswer::Events openai_events(const CallRequest& request, const std::string& default_model, bool chat) {
  return [&request, &default_model, chat](std::string& out, const Completion& header, StreamShown& shown,
                                          std::string_view reasoning, std::string_view content) {
    const std::string& model = request.model.empty() ? default_model : request.model;
    if (chat)
      chat_completion_delta(out, header, model, request.include_usage, !shown.opened, reasoning, content);
    else
      text_completion_delta(out, header, model, request.include_usage, content);
    return true;
  };
}
}  // namespace

HttpAnswer Gateway::chat(const HttpCall& call, const std::string& id) {
  require_method(call, "POST");
  ChatRequest request;
  LiveAnswer live(call.keepalive, openai_events(request, options_.model, true));
  const Completion completion = kept_call(
      call, id, [](std::string_view body, KeptRequest& kept) { return parse_chat_request(body, kept); },
      request, false, &live);
  return openai_answer(completion, request, true, live.shown());
}

HttpAnswer Gateway::completions(const HttpCall& call, const std::string& id) {
  require_method(call, "POST");
  ChatRequest request = parse_completion_request(call.body);
  request.turn.routing_key = std::string(call.routing_key);
  keep_alive_if_streamed(call, request);
  LiveAnswer live(call.keepalive, openai_events(request, options_.model, false));
  live_if_streamed(call, request, &live);
  bool created = false;
  const std::shared_ptr<GatewaySession> session = find_or_create(id, "", &created);
  Completion completion;
  {
    SessionLock lock(*session, call.keepalive, [&] { return request.stream; });
    const ForgetIfRefused forget_if_refused(*this, id, *session, created);
    completion = session->chat(request.turn);
  }
  return openai_answer(completion, request, false, live.shown());
}

HttpAnswer Gateway::openai_answer(const Completion& completion, const CallRequest& request, bool chat,
                                  const StreamShown& shown) const {
  const std::string& model = request.model.empty() ? options_.model : request.model;
  const auto logprobs = token_logprobs(completion, request.logprobs, renderer().tokenizer());
  const AnswerExtras extras{logprobs ? &*logprobs : nullptr, request.return_token_ids};
  if (request.stream) {
    const bool usage = request.include_usage;
    return HttpAnswer{200, kSseContentType,
                      chat ? chat_completion_sse(completion, model, usage, extras, shown)
                           : text_completion_sse(completion, model, usage, extras, shown),
                      0};
  }
  return json_answer(200, chat ? chat_completion_json(completion, model, extras)
                               : text_completion_json(completion, model, extras));
}

HttpAnswer Gateway::kept_answer(const HttpCall& call, const std::string& id, KeptDecoder decode,
                                AnswerWriter object, AnswerWriter stream, LiveWriter live_writer,
                                bool responses_api) {
  require_method(call, "POST");
  CallRequest request;
  LiveAnswer live(call.keepalive, [&](std::string& out, const Completion& header, StreamShown& shown,
                                      std::string_view reasoning, std::string_view content) {
    const std::string& model = request.model.empty() ? options_.model : request.model;
    live_writer(out, header, model, shown, request.show_reasoning ? reasoning : std::string_view(), content);
    return request.show_reasoning;
  });
  Completion completion = kept_call(call, id, decode, request, responses_api, &live);
  if (!request.show_reasoning) completion.reply.reasoning.clear();
  const std::string& model = request.model.empty() ? options_.model : request.model;
  const auto logprobs = token_logprobs(completion, request.logprobs, renderer().tokenizer());
  const TokenLogprobs* shown = logprobs ? &*logprobs : nullptr;
  if (request.stream)
    return HttpAnswer{200, kSseContentType, stream(completion, model, shown, live.shown()), 0};
  return json_answer(200, object(completion, model, shown, {}));
}

HttpAnswer Gateway::messages(const HttpCall& call, const std::string& id) {
  // (The Messages API has no log-probs: its requests never ask for them.)
  return kept_answer(
      call, id, [](std::string_view body, KeptRequest& kept) { return parse_messages_request(body, kept); },
      [](const Completion& c, const std::string& model, const TokenLogprobs*, const StreamShown&) {
        return anthropic_message_json(c, model);
      },
      [](const Completion& c, const std::string& model, const TokenLogprobs*, const StreamShown& shown) {
        return anthropic_message_sse(c, model, shown);
      },
      anthropic_message_delta);
}

HttpAnswer Gateway::responses(const HttpCall& call, const std::string& id) {
  return kept_answer(
      call, id, [](std::string_view body, KeptRequest& kept) { return parse_responses_request(body, kept); },
      [](const Completion& c, const std::string& model, const TokenLogprobs* logprobs, const StreamShown&) {
        return response_json(c, model, logprobs);
      },
      [](const Completion& c, const std::string& model, const TokenLogprobs* logprobs,
         const StreamShown& shown) { return response_sse(c, model, logprobs, shown); },
      response_delta, true);
}

size_t Gateway::prompt_tokens(const ChatTurn& turn) const {
  std::vector<TokenId> system, rest;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const FirstPrompt first = renderer().first_prompt(turn.messages, turn.tools, now, system, rest);
  const size_t header =
      first.opens_turn ? 0 : shared_.templates->base()->codec->context_template().turn_header.size();
  return system.size() + rest.size() + header;
}

HttpAnswer Gateway::count_tokens(const HttpCall& call) {
  require_method(call, "POST");
  const MessagesRequest request = parse_messages_request(call.body, true);
  return json_answer(200, json{{"input_tokens", prompt_tokens(request.turn)}}.dump());
}

HttpAnswer Gateway::response_input_tokens(const HttpCall& call, const std::string& id) {
  require_method(call, "POST");
  ResponsesRequest request = parse_responses_request(call.body);
  size_t tokens = 0;
  if (request.previous_response_id.empty()) {
    tokens = prompt_tokens(request.turn);
  } else {
    if (id.empty()) {
      throw bad_request("previous_response_not_found",
                        "Previous response with id '" + text_prefix(request.previous_response_id) +
                            "' not found: a response is a session's; count with "
                            "/v1/sessions/{id}/v1/responses/input_tokens or send the session id as "
                            "Authorization: Bearer <session id>",
                        "previous_response_id");
    }
    const std::shared_ptr<GatewaySession> session = find(id);
    SessionLock lock(*session);
    continue_chain(*session, request.previous_response_id, request.instruction_messages, request.turn);
    const ChainLoan loan{session->response_chain(), request.turn};
    tokens = prompt_tokens(request.turn);
  }
  return json_answer(200, json{{"input_tokens", tokens}, {"object", "response.input_tokens"}}.dump());
}

HttpAnswer Gateway::reward(const HttpCall& call, const std::string& id) {
  require_method(call, "POST");
  const json body = parse_body(call.body);
  const auto r = body.find("reward");
  if (r == body.end() || !r->is_number()) throw bad_request("bad_field", "reward must be a number", "reward");
  std::string status = "completed";
  if (const auto s = body.find("status"); s != body.end() && !s->is_null()) {
    if (!s->is_string()) throw bad_request("bad_status", "status must be a string", "status");
    status = s->get<std::string>();
  }
  const std::shared_ptr<GatewaySession> session = find(id);
  SessionLock lock(*session);
  session->reward(r->get<double>(), status);
  return json_answer(200, session->state().dump());
}

HttpAnswer Gateway::export_session(const HttpCall& call, const std::string& id) {
  const std::shared_ptr<GatewaySession> session = find(id);
  SessionLock lock(*session);
  if (!session->ended()) {
    throw GatewayError(409, "invalid_request_error", "session_running",
                       "session " + quote(id) + " is still running: post its reward before exporting",
                       "session_id");
  }
  const Trajectory& t = session->trajectory();
  proto::ExportResponse out;
  out.set_episode_id(id);
  const Tokenizer& tokenizer = renderer().tokenizer();
  // With several threads, each segment names its own (`segment_threads` lists them all).
  std::vector<std::string> threads;
  if (const auto it = t.metadata.find("segment_threads"); it != t.metadata.end()) {
    for (size_t at = 0; at <= it->second.size();) {
      const size_t comma = std::min(it->second.find(',', at), it->second.size());
      threads.push_back(it->second.substr(at, comma - at));
      at = comma + 1;
    }
  }
  for (size_t i = 0; i < t.segments.size(); ++i) {
    proto::Segment segment = to_proto(t, i);
    auto& metadata = *segment.mutable_metadata();
    metadata["episode_id"] = id;
    if (i < threads.size()) metadata["thread"] = threads[i];
    metadata["tokenizer"] = tokenizer.name();
    metadata["tokenizer_fingerprint"] = tokenizer.fingerprint();
    metadata["finish_reason"] = segment.finish_reason();  // (to_proto repaired the text and metadata's UTF-8)
    *out.add_segments() = std::move(segment);
  }
  // JSON unless the trainer's Accept asks for binary protobuf, as the episodes' export answers.
  const wire::WireFormat format = wire::response_format(call.accept, wire::WireFormat::kJson);
  return HttpAnswer{200, std::string(wire::content_type(format)), wire::encode_message(out, format), 0};
}

HttpAnswer Gateway::models(const HttpCall& call, std::span<const std::string_view> rest) const {
  require_method(call, "GET");
  // One model: the upstream's name when --llm-model gives it, else the gateway's; the context is a session's
  // default capacity (the window the gateway compacts within).
  const std::string& name = options_.sampling.model.empty() ? options_.model : options_.sampling.model;
  const json model = {{"id", name},
                      {"object", "model"},
                      {"created", started_},
                      {"owned_by", "crl"},
                      {"root", name},
                      {"parent", nullptr},
                      {"max_model_len", options_.budget.capacity}};
  if (rest.empty()) return json_answer(200, json{{"object", "list"}, {"data", json::array({model})}}.dump());
  if (rest[0] != name) {
    throw GatewayError(404, "invalid_request_error", "model_not_found",
                       "the model " + quote(std::string(rest[0])) + " does not exist (this gateway serves " +
                           quote(name) + ")",
                       "model");
  }
  return json_answer(200, model.dump());
}

}  // namespace crl::server::gateway
