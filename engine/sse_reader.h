#pragma once
// Reading server-sent events as their bytes arrive (the WHATWG EventSource rules): the gateway reads an LLM
// server's streamed answer with it (server/gateway/upstream.h: SGLang's `/generate` with "stream": true).
//
// Lines end with "\r\n", "\n" or "\r" (a "\r" at the end of what has arrived is taken as a line's end, and a
// "\n" that then follows it is skipped). A blank line ends an event; its `data:` lines are joined with "\n"
// (one space after the colon dropped), `event:` names it, lines that start with ':' are comments, and other
// fields (`id:`, `retry:`) are ignored. An event without data is not dispatched. What has not yet ended an
// event is bounded (`max_event_bytes`): a server that never ends its event cannot grow the reader's memory.
#include <cstddef>
#include <string>
#include <string_view>

namespace crl {

struct SseEvent {
  std::string name;  // `event:` ("" when none)
  std::string data;
};

class SseReader {
 public:
  explicit SseReader(size_t max_event_bytes) : max_event_bytes_(max_event_bytes) {}
  // Takes the next bytes. False once the event being read has grown past max_event_bytes (error()).
  bool feed(std::string_view bytes);
  // The next whole event, if one has arrived.
  bool next(SseEvent& event);
  const std::string& error() const { return error_; }
  // Bytes taken but not yet dispatched (the event being read, an unended line).
  size_t pending() const { return buffer_.size() - at_ + pending_.data.size() + pending_.name.size(); }

 private:
  // One whole line (without its end) into pending_; true when it was blank and pending_ holds an event.
  bool line(std::string_view text);

  size_t max_event_bytes_;
  std::string buffer_;  // bytes taken; those before at_ are read
  size_t at_ = 0;
  bool skip_newline_ = false;  // the last line ended with "\r": a "\n" right after it belongs to it
  SseEvent pending_;
  bool has_data_ = false;
  std::string error_;
};

}  // namespace crl
