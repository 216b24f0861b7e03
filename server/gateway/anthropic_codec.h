#pragma once
// The Anthropic Messages API on the gateway's session machinery, for Claude-Code-style harnesses:
//   POST .../v1/messages               {model, max_tokens, system (string | text blocks), messages (role user
//   |
//                                      assistant; content a string or blocks: text, tool_use, tool_result),
//                                      tools [{name, description, input_schema}], temperature, top_p, top_k,
//                                      stream}; stop_sequences are refused (400) until the upstream
//                                      request carries stop strings
//   POST .../v1/messages/count_tokens  {"input_tokens": N}: the rendered prompt of those messages
// Blocks map onto the session's messages: a user turn's tool_result blocks become tool messages and its text
// a user message (in block order); an assistant turn's text is its content and its tool_use blocks its tool
// calls (input as the arguments' JSON). Tools become OpenAI function tools for the chat template. Answers are
// a `message` object or, with `stream: true`, the event sequence message_start, content_block_start /
// _delta / _stop per block, message_delta, message_stop. Errors: {"type": "error", "error": {type, message}}.
#include <string>
#include <string_view>

#include "server/gateway/gateway_error.h"
#include "server/gateway/gateway_session.h"

namespace crl::server::gateway {

struct MessagesRequest {
  ChatTurn turn;
  bool stream = false;
  std::string model;
};

// Throws GatewayError 400 naming the field. `count_only`: max_tokens is not required.
MessagesRequest parse_messages_request(std::string_view body, bool count_only);
std::string anthropic_message_json(const Completion& completion, const std::string& model);
std::string anthropic_message_sse(const Completion& completion, const std::string& model);
std::string anthropic_error_json(const GatewayError& error);

}  // namespace crl::server::gateway
