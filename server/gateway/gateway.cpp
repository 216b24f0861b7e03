#include "server/gateway/gateway.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "engine/tokenizer.h"
#include "engine/trajectory_io.h"
#include "server/gateway/call_answers.h"
#include "server/gateway/session_lock.h"
#include "server/session_table.h"
#include "wire/utf8.h"
#include "wire/wire_codec.h"

namespace crl::server::gateway {

using json = nlohmann::json;

namespace {

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
