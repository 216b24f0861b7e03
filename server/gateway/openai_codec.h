#pragma once
// The OpenAI Chat Completions and Completions wire format of the gateway: requests as harnesses send them,
// answers as `chat.completion` objects or, with `stream: true`, as server-sent events of
// `chat.completion.chunk` objects ended by `data: [DONE]` (sse.h), and errors as {"error": {...}}.
//
// Accepted request fields: messages (role system | developer | user | assistant | tool; content a string,
// null, or a list of {"type": "text", "text"} parts; tool_calls; tool_call_id), max_tokens /
// max_completion_tokens, temperature, top_p, top_k, stream, stream_options.include_usage, tools (passed into
// the chat template), model, n (1 only), logprobs (true: the answer's `logprobs.content` holds every sampled
// token), top_logprobs (0..20 with logprobs: the K most likely tokens at each position, asked of the
// upstream), return_tokens_as_token_ids (vLLM's: tokens written "token_id:N"), return_token_ids (vLLM's:
// prompt_token_ids and token_ids, see AnswerExtras), response_format (text | json_object | json_schema with
// json_schema.schema: constrained decoding asked of the upstream for this call's answer, never for a
// summary), tool_choice "none" (the answer is text: its <tool_call> blocks are not read as tool calls), stop
// (a string or a list, passed upstream), and the fields harnesses send that change nothing here (seed:
// sampling seeds come from the session's stream keys; user; tool_choice auto, required or a named function:
// not enforced). Plain completions (POST .../v1/completions): prompt (one string: the whole text so far),
// max_tokens, temperature, top_p, top_k, stop, stream, model, n (1), logprobs (K in 0..20: tokens,
// token_logprobs, text_offset and top_logprobs holding the sampled token and the K most likely, as vLLM),
// return_tokens_as_token_ids, return_token_ids, response_format; answered as `text_completion` objects or,
// streaming, as `text_completion` chunks ended by `data: [DONE]`; echo, suffix, best_of > 1 and a list of
// prompts are refused. Anything malformed is a 400 naming the field.
//
// Log-probs: one entry per sampled token, the ids and log-probs the export records (an end-of-turn token
// and a matched stop string's tokens included, so the entries are `usage.completion_tokens` long and line
// up with the trained tokens). A token's text is what the tokenizer decodes it to alone (special tokens as
// their strings); a token that is part of a UTF-8 character shows U+FFFD in `token` and its own bytes in
// `bytes`; `text_offset` counts the characters of the tokens as written. A stream carries every entry on
// its first chunk with sampled text (the content, else the first tool call, else the finish chunk).
// Alternatives come from the upstream (SGLang top_logprobs_num with ids, decoded here; the OpenAI API's
// top_logprobs text keys, used as they are), are asked for execution calls only (a summary never), and a
// retry answers those its first call was sampled with.
// Bodies are read with engine/json_view.h (strings as views into the body, one pass; read_json's limits).
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_view.h"
#include "engine/tokenizer.h"
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
// A request body read with the fast reader (engine/json_view.h): its views point into `body`. Throws
// GatewayError 400 (bad_json | json_too_deep | duplicate_key, as read_json's errors) or for a non-object.
JsonDocument read_request_body(std::string_view body);

// One alternative at a sampled position: its text (as a token is written) and log-prob.
struct Alternative {
  std::string token;
  float logprob = 0;
};

// The sampled tokens of an answer as its `logprobs` shows them.
struct TokenLogprobs {
  std::vector<std::string> tokens;            // each token's bytes as decoded alone, or "token_id:N"
  std::span<const float> logprobs;            // the completion's
  std::vector<std::vector<Alternative>> top;  // per token when alternatives were asked (else empty)
};
// What `ask` asks to see of `completion`'s tokens; nullopt when it asks nothing.
std::optional<TokenLogprobs> token_logprobs(const Completion& completion, LogprobsAsk ask,
                                            const Tokenizer& tokenizer);

// What a call asked its answer to carry besides the message (nothing: the plain OpenAI answer).
struct AnswerExtras {
  const TokenLogprobs* logprobs = nullptr;  // null: "logprobs": null
  // vLLM's return_token_ids: the sampled ids (`token_ids`) and the forwarded prompt's (`prompt_token_ids`:
  // the window the policy saw, Completion::prompt_ids). Chat answers carry prompt_token_ids at the top level
  // (a stream: on its first chunk) and token_ids in the choice (a stream: with the log-prob entries);
  // completions carry both in the choice (a stream: on its first chunk).
  bool token_ids = false;
};

std::string chat_completion_json(const Completion& completion, const std::string& model,
                                 const AnswerExtras& extras = {});
// The same answer as server-sent events: a role chunk, a content chunk, one chunk per tool call, the finish
// chunk, the usage chunk when asked, then `data: [DONE]`.
std::string chat_completion_sse(const Completion& completion, const std::string& model, bool include_usage,
                                const AnswerExtras& extras = {});
// A plain completion: a `text_completion` object, or its stream (one text chunk, the finish chunk, the usage
// chunk when asked, `data: [DONE]`).
std::string text_completion_json(const Completion& completion, const std::string& model,
                                 const AnswerExtras& extras = {});
std::string text_completion_sse(const Completion& completion, const std::string& model, bool include_usage,
                                const AnswerExtras& extras = {});
std::string openai_error_json(const GatewayError& error);

}  // namespace crl::server::gateway
