#pragma once
// The Anthropic Messages API on the gateway's session machinery, for Claude-Code-style harnesses:
//   POST .../v1/messages               {model, max_tokens, system (string | text blocks, joined by ""; Claude
//                                      Code's attribution line x-anthropic-billing-header left out),
//                                      messages (role user | assistant | system, a mid-conversation system
//                                      message kept where it stands; content a string or blocks: text
//                                      (joined by "\n"), tool_use, tool_result), tools [{name, description,
//                                      input_schema}],
//                                      temperature, top_p, top_k, stream, stop_sequences (passed
//                                      upstream; an answer that ended on one has stop_reason
//                                      "stop_sequence" and stop_sequence set), tool_choice (auto, none:
//                                      the answer is text, never tool_use; any and a named tool enforced
//                                      by constrained decoding; disable_parallel_tool_use: tool_choice.h)
//   POST .../v1/messages/count_tokens  {"input_tokens": N}: the rendered prompt of those messages
// Blocks map onto the session's messages: a user turn's tool_result blocks become tool messages and its text
// a user message (in block order); an assistant turn's text is its content and its tool_use blocks its tool
// calls (input as the arguments' JSON); its thinking blocks are skipped. Tools become OpenAI function tools
// for the chat template. `thinking` {"type": "enabled" | "adaptive"} shows a thinking model's reasoning
// (reasoning_format.h) as a first thinking block (signature ""); "disabled" or absent does not. Answers are
// a `message` object or, with `stream: true`, the event sequence message_start, content_block_start /
// _delta / _stop per block, message_delta, message_stop. Errors: {"type": "error", "error": {type, message}}.
#include <string>
#include <string_view>

#include "server/gateway/gateway_error.h"
#include "server/gateway/gateway_session.h"
#include "server/gateway/kept_request.h"
#include "server/gateway/stream_shown.h"

namespace crl::server::gateway {

using MessagesRequest = CallRequest;

// Throws GatewayError 400 naming the field. `count_only`: max_tokens is not required.
MessagesRequest parse_messages_request(std::string_view body, bool count_only);
// The same (max_tokens required), reading only what `body` adds to the session's kept body
// (kept_request.h) and keeping `body`: turn.messages and turn.tools are lent by `kept` (give them back
// after the call) and turn.keys hold the messages' keys. The answer and every error are the other's.
MessagesRequest parse_messages_request(std::string_view body, KeptRequest& kept);
std::string anthropic_message_json(const Completion& completion, const std::string& model);
// `shown`: what already went out while the answer was sampled (stream_shown.h); the events are
// then the rest.
std::string anthropic_message_sse(const Completion& completion, const std::string& model,
                                  const StreamShown& shown = {});
// The events a stream sends while its answer is sampled (live_answer.h), appended to `out`: message_start
// first, a thinking block's start and thinking_delta for the reasoning, then (the thinking block ended) the
// text block's start and text_delta for the content. `header` gives the id and counts.
void anthropic_message_delta(std::string& out, const Completion& header, const std::string& model,
                             StreamShown& shown, std::string_view reasoning, std::string_view content);
std::string anthropic_error_json(const GatewayError& error);

}  // namespace crl::server::gateway
