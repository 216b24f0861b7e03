// The gateway's chat calls of the three APIs (gateway.h): OpenAI chat and plain completions, Anthropic
// messages, Responses, and their token counts (count_tokens, Responses' input_tokens). Each decodes its body
// against the session's kept one under the session's lock, runs the turn (gateway_session.h) and answers in
// its API's shape, whole or as a stream (sent as it is sampled: live_answer.h).
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_view.h"
#include "engine/sse.h"
#include "server/gateway/anthropic_codec.h"
#include "server/gateway/call_answers.h"
#include "server/gateway/gateway.h"
#include "server/gateway/live_answer.h"
#include "server/gateway/openai_answer.h"
#include "server/gateway/openai_codec.h"
#include "server/gateway/responses_codec.h"
#include "server/gateway/session_lock.h"
#include "server/gateway/stream_keepalive.h"
#include "server/gateway/tool_choice.h"

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
}  // namespace

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

}  // namespace crl::server::gateway
