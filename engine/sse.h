#pragma once
// Server-sent events (the WHATWG EventSource format) for streaming answers: the gateway's and `crl lm
// serve`'s (policies/lm/serve.h). `crl lm serve` sends each sampling round's events as they are sampled
// (a chunked body, server/router.h HttpAnswer::stream). The gateway sends what is certain of an answer as
// its SGLang upstream streams it, and the rest once it is whole (server/gateway/live_answer.h); reading an
// upstream's events is engine/sse_reader.h.
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
