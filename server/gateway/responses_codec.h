#pragma once
// The OpenAI Responses API on the gateway's session machinery, for the harnesses that speak it (Codex CLI,
// the OpenAI Agents SDK, and others built on the `responses.create` call):
//   POST .../v1/responses   {model, instructions (a lead system message), input (a string: one user
//                           message; or a list of items), previous_response_id (the input continues
//                           that response's conversation: response_chain.h), tools [{"type": "function",
//                           name, description, parameters}], tool_choice and parallel_tool_calls ("none": the
//                           answer is text, never function_call; required and a named function enforced by
//                           constrained decoding: tool_choice.h), max_output_tokens,
//                           temperature, top_p, top_k (vLLM's), stream, text.format (text | json_object |
//                           json_schema with its schema: constrained decoding asked of the upstream),
//                           include (a list of strings: "message.output_text.logprobs" shows the sampled
//                           tokens' log-probs on the output_text part, openai_answer.h's entries; other
//                           values are without effect), top_logprobs (0..20 alternatives per token, asked
//                           of the upstream only with the logprobs included)}
// Input items map onto the session's messages: a `message` item (also one without `type`; role user |
// assistant | system | developer; content a string or input_text / output_text / refusal parts) is one
// message; a `function_call` item is a tool call of the assistant message before it (a new, empty assistant
// message when the one before is not the assistant's); a `function_call_output` item is a tool message
// (output a string or text parts); a `reasoning` item is skipped (the window holds the sampled reasoning).
// Refused with a 400 naming the field: other item types (item_reference and the built-in tools' calls need
// state or tools the gateway does not have), image, file and audio parts, tools other than functions,
// conversation (the gateway keeps no conversation objects: send the whole conversation, or chain with
// previous_response_id), background: true, and a previous_response_id that is not the session's
// (previous_response_not_found). Accepted and without effect: store (every call is recorded for training
// either way), metadata, reasoning, user, truncation, prompt_cache_key, service_tier,
// text.verbosity.
//
// The answer is a `response` object {created_at, error, id ("resp_..."), incomplete_details, model, object,
// output, status, usage}: output holds a `reasoning` item (one reasoning_text part) when a thinking model's
// answer has reasoning (reasoning_format.h), a `message` item (one output_text part) when the answer has
// text or no tool calls, then one `function_call` item per tool call (call_id the call's id, arguments its
// JSON text). status is "incomplete" with incomplete_details.reason "max_output_tokens" when the answer ran
// out of tokens, else "completed". With `stream: true`: response.created, response.in_progress, per item
// response.output_item.added, its content (response.reasoning_text.delta and .done;
// response.content_part.added, response.output_text.delta and .done, response.content_part.done; or
// response.function_call_arguments.delta and .done), response.output_item.done, then response.completed (or
// response.incomplete); every event named and numbered (sequence_number), no [DONE]. Errors are the OpenAI
// API's {"error": {...}}.
#include <string>
#include <string_view>

#include "server/gateway/gateway_session.h"
#include "server/gateway/kept_request.h"
#include "server/gateway/openai_answer.h"

namespace crl::server::gateway {

using ResponsesRequest = CallRequest;

// Throws GatewayError 400 naming the field.
ResponsesRequest parse_responses_request(std::string_view body);
// The same, reading only what `body` adds to the session's kept body (kept_request.h) and keeping `body`
// (an `input` string is decoded whole and keeps nothing): turn.messages and turn.tools are lent by `kept`
// when kept (give them back after the call). The answer and every error are the other's.
ResponsesRequest parse_responses_request(std::string_view body, KeptRequest& kept);
// `logprobs` (null: not asked) on the output_text part.
std::string response_json(const Completion& completion, const std::string& model,
                          const TokenLogprobs* logprobs = nullptr);
// The answer's id, "resp_" and the completion id's suffix (what previous_response_id names).
std::string response_id(const Completion& completion);
// `shown`: what already went out while the answer was sampled (stream_shown.h); the events are then the
// rest, numbered on from there.
std::string response_sse(const Completion& completion, const std::string& model,
                         const TokenLogprobs* logprobs = nullptr, const StreamShown& shown = {});
// The events a stream sends while its answer is sampled (live_answer.h), appended to `out`: response.created
// and .in_progress first, the reasoning item's added event and reasoning_text deltas, then (the reasoning
// item done) the message item's added and content_part.added events and output_text deltas. `header` gives
// the ids and the reasoning shown so far; `shown.events` numbers the events.
void response_delta(std::string& out, const Completion& header, const std::string& model, StreamShown& shown,
                    std::string_view reasoning, std::string_view content);

}  // namespace crl::server::gateway
