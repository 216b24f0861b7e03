#pragma once
// The OpenAI Chat Completions and Completions wire format of the gateway: requests as harnesses send them,
// answers as `chat.completion` objects or, with `stream: true`, as server-sent events of
// `chat.completion.chunk` objects ended by `data: [DONE]` (sse.h), and errors as {"error": {...}}.
//
// Accepted request fields: messages (role system | developer | user | assistant | tool; content a string,
// null, or a list of {"type": "text", "text"} parts; tool_calls; tool_call_id), max_tokens /
// max_completion_tokens, temperature, top_p, top_k, stream, stream_options.include_usage, tools (passed into
// the chat template), model, n (1 only), and the fields harnesses send that change nothing here (seed:
// sampling seeds come from the session's stream keys; tool_choice, user, logprobs, stop, ...). Anything
// malformed is a 400 naming the field.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/gateway/gateway_error.h"
#include "server/gateway/gateway_session.h"

namespace crl::server::gateway {

struct ChatRequest {
  ChatTurn turn;
  bool stream = false;
  bool include_usage = false;
  std::string model;
};

// Throws GatewayError 400 naming the field.
ChatRequest parse_chat_request(std::string_view body);
// One message of a chat request (also used for the Anthropic codec's conversions); `where` is its path.
Message parse_openai_message(const nlohmann::json& message, const std::string& where);

std::string chat_completion_json(const Completion& completion, const std::string& model);
// The same answer as server-sent events: a role chunk, a content chunk, one chunk per tool call, the finish
// chunk, the usage chunk when asked, then `data: [DONE]`.
std::string chat_completion_sse(const Completion& completion, const std::string& model, bool include_usage);
std::string openai_error_json(const GatewayError& error);

}  // namespace crl::server::gateway
