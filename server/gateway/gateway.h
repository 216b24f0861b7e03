#pragma once
// The compaction gateway (PROTOCOL.md section 5) inside `crl serve --llm URL --api sglang|openai`: an agent
// harness points its OpenAI base URL at the server and every call goes through a session
// (gateway_session.h) that keeps the token-exact compacted window, fires the trigger, asks the same model
// for the summary and records segments exactly as the engine's own episodes do.
//
//   POST   /v1/sessions                              explicit create (budget, sampling, ids, metadata)
//   GET    /v1/sessions/{id}                         state
//   DELETE /v1/sessions/{id}
//   POST   /v1/sessions/{id}/reward                  {"reward": r, "status": "completed"} ends the rollout
//   GET    /v1/sessions/{id}/export                  the section 1 export (ExportResponse, as for episodes:
//                                                     JSON, or binary with Accept: application/x-protobuf)
//   POST   /v1/sessions/{id}/v1/chat/completions     OpenAI chat completions (stream: true for SSE)
//   POST   /v1/chat/completions                      the same, the session id from Authorization: Bearer
//   POST   /v1/sessions/{id}/v1/completions          OpenAI plain completions (prompt = the whole text so
//   POST   /v1/completions                           far; gateway_session.h), or with the Bearer session
//   POST   /v1/sessions/{id}/v1/messages             the Anthropic Messages API (anthropic_codec.h)
//   POST   /v1/messages                              the same, the session id from Authorization: Bearer
//                                                    or x-api-key
//   POST   [/v1/sessions/{id}]/v1/messages/count_tokens  {"input_tokens": N} of the rendered prompt
//   POST   /v1/sessions/{id}/v1/responses            the OpenAI Responses API (responses_codec.h)
//   POST   /v1/responses                             the same, the session id from Authorization: Bearer
//   POST   [/v1/sessions/{id}]/v1/responses/input_tokens  {"input_tokens": N, "object":
//                                                    "response.input_tokens"} of the rendered prompt
//   GET    [/v1/sessions/{id}]/v1/models[/{model}]   the one model served (vLLM's and SGLang's shape)
// Sessions idle past --idle-timeout are reaped (reap_idle). The first chat call on an unknown id creates the
// session with the server's defaults. Session ids are the client's (a trainer's sample id): 1-128 of
// [A-Za-z0-9._:-]. Every error is OpenAI-shaped.
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "server/gateway/gateway_session.h"
#include "server/gateway/stream_keepalive.h"
#include "server/router.h"

namespace crl::server::gateway {

struct TokenLogprobs;  // openai_answer.h
struct StreamShown;    // openai_answer.h
class LiveAnswer;      // live_answer.h

struct GatewayOptions {
  UpstreamOptions upstream;
  std::string tokenizer = "byte";  // engine/tokenizer.h make_tokenizer
  std::string chat_template = "chatml";
  // The template's variables on every render (vLLM's --default-chat-template-kwargs, e.g. Qwen3's
  // {"enable_thinking": false}), JSON object text; empty: the template's own defaults.
  std::string template_variables;
  std::string tool_call_parser = "auto";  // tool_call_format.h: auto | hermes | llama3_json | ...
  std::string reasoning_parser = "auto";  // reasoning_format.h: auto | none | think
  Budget budget;                          // the default of a session; POST /v1/sessions may give another
  // The upstream model's context as its GET /v1/models said at start (policies/llm/served_models.h; crl
  // serve checks --capacity against it, then set_upstream_context()); a session's budget.capacity above it
  // is refused. 0: not known.
  int64_t upstream_context = 0;
  llm::SamplingParams sampling;
  size_t max_sessions = 4096;         // live sessions at most (429 with retry-after beyond)
  std::string model = "crl-gateway";  // answered as `model` when the request names none
  // A session no call has touched for this long is removed by reap_idle() (crl serve: --idle-timeout, the
  // episodes' reaper timer calls it), ended or not, like an idle episode.
  double idle_timeout_s = 600.0;
  // A streamed call that has waited this long for the upstream begins its answer and sends a comment line
  // every period until the events (stream_keepalive.h; crl serve: --stream-keepalive); <= 0: never.
  double stream_keepalive_s = 15.0;
  // A streamed call's upstream call is streamed too (SGLang) and its answer sent as it is sampled
  // (live_answer.h; crl serve: --stream-upstream on|off); false: sent whole once the upstream answered.
  bool stream_upstream = true;
};

class Gateway {
 public:
  // Throws crl::Error for a bad budget, tokenizer, template or URL (naming the option).
  Gateway(GatewayOptions options, ServerMetrics* metrics);
  ~Gateway();

  // The answer to a gateway path (`parts` is the split path, parts[0] == "v1"); never throws.
  HttpAnswer route(const HttpCall& call, const std::vector<std::string_view>& parts);
  size_t sessions() const;
  // GatewayOptions::upstream_context, once the upstream has said it; before serving (not thread-safe).
  void set_upstream_context(int64_t max_model_len) { options_.upstream_context = max_model_len; }
  // Removes the sessions idle past options.idle_timeout_s (a session inside a call is never removed; a call
  // that found one just before it was removed answers 404). Returns how many. Thread-safe.
  size_t reap_idle();
  // The server's drain deadline passed: upstream calls in flight end now (Upstream::cancel). Thread-safe.
  void cancel_upstream();
  // The server's event loop has ended: the upstream's sockets leave its io_context before it is destroyed
  // (Upstream::leave_io_context()).
  void leave_io_context();

 private:
  // route()'s routing; throws GatewayError (or crl::Error) for route() to answer.
  HttpAnswer dispatch(const HttpCall& call, const std::vector<std::string_view>& parts);
  std::shared_ptr<GatewaySession> find(const std::string& id) const;
  // A new session renders with the template variant of `kwargs` (its chat_template_kwargs as JSON text).
  // `created` (when given): whether this call made the session.
  std::shared_ptr<GatewaySession> find_or_create(const std::string& id, const std::string& kwargs = "",
                                                 bool* created = nullptr);
  // Removes session `id` if it still is `session` and nothing started it (its first call was refused);
  // the caller holds the session's lock.
  void forget_unstarted(const std::string& id, GatewaySession& session);
  // A scope guard for a call that made a session: when the call is refused (throws) before the session
  // started, the session is removed again (gateway.cpp).
  class ForgetIfRefused;
  std::shared_ptr<GatewaySession> existing(const std::string& id) const;  // null when unknown
  HttpAnswer create(const HttpCall& call);
  // A chat call of any API (chat completions, messages, responses): `decode` reads the body against the
  // session's kept one (kept_request.h); `request` is what it decoded. `responses_api`: the call continues
  // and extends the session's chain of responses (response_chain.h).
  // `live` (null: none): how the call's answer is sent as it is sampled, when the call may be
  // (live_answer.h, live_if_streamed).
  using KeptDecoder = CallRequest (*)(std::string_view body, KeptRequest& kept);
  Completion kept_call(const HttpCall& call, const std::string& id, KeptDecoder decode, CallRequest& request,
                       bool responses_api = false, LiveAnswer* live = nullptr);
  // A streamed call's answer goes out as the upstream samples it when --stream-upstream is on, the
  // transport can send before the handler returns, and the call asks for nothing the answer's first chunk
  // must carry (log-probs, token ids).
  void live_if_streamed(const HttpCall& call, CallRequest& request, LiveAnswer* live) const;
  HttpAnswer chat(const HttpCall& call, const std::string& id);
  HttpAnswer completions(const HttpCall& call, const std::string& id);
  // The OpenAI answer (chat, or a plain completion) to `request`, with what it asked to see of its tokens.
  // `shown`: what went out while it was sampled (live_answer.h).
  HttpAnswer openai_answer(const Completion& completion, const CallRequest& request, bool chat,
                           const StreamShown& shown) const;
  // A call whose answer is an object or, with `stream: true`, its events, written by `object` / `stream`
  // (Anthropic messages, Responses).
  // (logprobs: what the call asked to see of its tokens, null when nothing; only Responses answers show them)
  // (shown: what a stream sent while the answer was sampled; `live` writes those events: live_answer.h)
  using AnswerWriter = std::string (*)(const Completion& completion, const std::string& model,
                                       const TokenLogprobs* logprobs, const StreamShown& shown);
  using LiveWriter = void (*)(std::string& out, const Completion& header, const std::string& model,
                              StreamShown& shown, std::string_view reasoning, std::string_view content);
  HttpAnswer kept_answer(const HttpCall& call, const std::string& id, KeptDecoder decode, AnswerWriter object,
                         AnswerWriter stream, LiveWriter live, bool responses_api = false);
  HttpAnswer messages(const HttpCall& call, const std::string& id);
  HttpAnswer responses(const HttpCall& call, const std::string& id);
  HttpAnswer count_tokens(const HttpCall& call);
  // POST [/v1/sessions/{id}]/v1/responses/input_tokens: the tokens of the prompt that request would send
  // as a session's first call (its whole conversation, a previous_response_id's included: the session `id`,
  // from the path or the Bearer token, is needed only for that; "" when none). The Responses API's count.
  HttpAnswer response_input_tokens(const HttpCall& call, const std::string& id);
  // The tokens of the prompt a session's first call with `turn`'s messages and tools sends.
  size_t prompt_tokens(const ChatTurn& turn) const;
  // GET /v1/models (`rest` empty) or /v1/models/{model}, as vLLM and SGLang answer them.
  HttpAnswer models(const HttpCall& call, std::span<const std::string_view> rest) const;
  HttpAnswer reward(const HttpCall& call, const std::string& id);
  HttpAnswer export_session(const HttpCall& call, const std::string& id);
  // The server's own renderer (the template with its --default-chat-template-kwargs).
  const MessageRenderer& renderer() const { return shared_.templates->base()->renderer; }

  GatewayOptions options_;
  GatewayShared shared_;
  int64_t started_ = 0;  // unix seconds: the models' `created`
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<GatewaySession>> sessions_;
};

// Whether `id` is a valid session id (1-128 of [A-Za-z0-9._:-]).
bool valid_session_id(std::string_view id);

// Whether `path` (without its query) is one of the gateway's routes (the router sends it to route()).
bool is_gateway_path(std::string_view path);
// A request the transport refused before routing (413 body over --max-body-bytes, 431, 400 framing), on a
// gateway path: answered in the shape of the gateway's errors (OpenAI's; Anthropic's on .../v1/messages),
// so a harness's client raises its usual exception instead of failing to parse crl's own error shape.
HttpAnswer gateway_refusal(std::string_view path, int status, const std::string& code,
                           const std::string& message);

}  // namespace crl::server::gateway
