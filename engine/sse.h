#pragma once
// Server-sent events (the WHATWG EventSource format) for streaming answers: the gateway's and `crl lm
// serve`'s (policies/lm/serve.h). `crl lm serve` sends each sampling round's events as they are sampled
// (a chunked body, server/router.h HttpAnswer::stream). The gateway has the whole answer before it writes
// (its upstream call is token-in, token-out and not streamed), so its stream is one body of events with
// Content-Type text/event-stream; an SSE reader cannot tell the difference, and nothing is half-sent when a
// call fails (that is an ordinary error answer).
#include <string>
#include <string_view>

namespace crl {

inline constexpr const char* kSseContentType = "text/event-stream";

// "data: PAYLOAD\n\n" (PAYLOAD is one line of JSON: JSON text escapes every newline).
inline void append_sse_data(std::string& out, std::string_view payload) {
  out += "data: ";
  out += payload;
  out += "\n\n";
}
// "event: NAME\ndata: PAYLOAD\n\n" (the Anthropic stream names its events).
inline void append_sse_event(std::string& out, std::string_view name, std::string_view payload) {
  out += "event: ";
  out += name;
  out += '\n';
  append_sse_data(out, payload);
}

}  // namespace crl
