#pragma once
// The OpenAI Chat Completions and Completions requests of the gateway, as harnesses send them. Their answers
// (chat.completion and text_completion objects, streams, errors) are openai_answer.h's.
//
// Accepted request fields: messages (role system | developer | user | assistant | tool; content a string,
// null, or a list of {"type": "text", "text"} parts; tool_calls; tool_call_id), max_tokens /
// max_completion_tokens, temperature, top_p, top_k, stream, stream_options.include_usage, tools (passed into
// the chat template), model, n (1 only), logprobs (true: the answer's `logprobs.content` holds every sampled
// token), top_logprobs (0..20 with logprobs: the K most likely tokens at each position, asked of the
// upstream), return_tokens_as_token_ids (vLLM's: tokens written "token_id:N"), return_token_ids (vLLM's:
// prompt_token_ids and token_ids, see AnswerExtras), response_format (text | json_object | json_schema with
// json_schema.schema: constrained decoding asked of the upstream for this call's answer, never for a
// summary), tool_choice and parallel_tool_calls (tool_choice.h: none, auto, or required / a named
// function enforced by constrained decoding), chat_template_kwargs (an object: accepted when it changes
// nothing the template writes, else a 400: template_kwargs.h), stop (a string or a list, passed upstream),
// and the fields harnesses send that change nothing here (seed: sampling seeds come from the session's stream
// keys; user). Plain completions (POST .../v1/completions): prompt (one string: the whole text so far),
// max_tokens, temperature, top_p, top_k, stop, stream, model, n (1), logprobs (K in 0..20: tokens,
// token_logprobs, text_offset and top_logprobs holding the sampled token and the K most likely, as vLLM),
// return_tokens_as_token_ids, return_token_ids, response_format; answered as `text_completion` objects or,
// streaming, as `text_completion` chunks ended by `data: [DONE]`; echo, suffix, best_of > 1 and a list of
// prompts are refused. Anything malformed is a 400 naming the field.
//
// Bodies are read with engine/json_view.h (strings as views into the body, one pass; read_json's limits).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_view.h"
#include "server/gateway/gateway_error.h"
#include "server/gateway/gateway_session.h"
#include "server/gateway/kept_request.h"

namespace crl::server::gateway {

using ChatRequest = CallRequest;

// Throws GatewayError 400 naming the field.
ChatRequest parse_chat_request(std::string_view body);
// The same, reading only what `body` adds to the session's kept body (kept_request.h) and keeping `body`:
// turn.messages are lent by `kept` (give them back after the call) and turn.keys hold their keys. The
// answer and every error are parse_chat_request's.
ChatRequest parse_chat_request(std::string_view body, KeptRequest& kept);
// A plain completion request (turn.prompt set). Throws GatewayError 400 naming the field.
ChatRequest parse_completion_request(std::string_view body);
// Stop strings: a list of 1..16 non-empty strings of at most 1024 bytes (OpenAI's `stop` may also be one
// string; null or absent: none). Throws GatewayError 400 naming `field`.
std::vector<std::string> parse_stop(JsonView value, const std::string& field, bool allow_string);
// A request's `tools` (absent, null or a list; 400 otherwise) decoded into `turn.tools`, or with `kept`
// seen by it (KeptRequest::see_tools: decoded once per distinct text).
void read_tools(JsonView request, ToolsDecoder decode, KeptRequest* kept, ChatTurn& turn);
// One message of a chat request, messages[index] (its path in errors).
Message parse_openai_message(JsonView message, size_t index);
// The string value of `key` in `object`, or "" when it is not a string.
std::string_view string_or_empty(JsonView object, std::string_view key);
// A request's optional number or boolean `key` (absent or null: nullopt). Throws GatewayError 400 naming it.
std::optional<double> number(JsonView body, const char* key);
std::optional<bool> flag(JsonView body, const char* key);
// A count of alternatives per sampled token (chat `top_logprobs`, the completions' `logprobs`, Responses'
// `top_logprobs`): an integer in 0..20, as vLLM takes it (OpenAI's own API stops at 20 for chat, 5 for
// completions); absent or null: nullopt. Throws GatewayError 400 naming `key`.
std::optional<int> alternatives(JsonView body, const char* key);
// A request body read with the fast reader (engine/json_view.h): its views point into `body`. Throws
// GatewayError 400 (bad_json | json_too_deep | duplicate_key, as read_json's errors) or for a non-object.
JsonDocument read_request_body(std::string_view body, const JsonKnownMember* known = nullptr);

}  // namespace crl::server::gateway
