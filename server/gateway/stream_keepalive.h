#pragma once
// A streamed gateway call's keep-alive while the upstream samples.
//
// Why: a call with `stream: true` is answered once the upstream's answer is whole (its events are written
// from it: tool calls and reasoning are read from the whole text). A long sample (a reasoning model's
// thousands of tokens on a loaded server) would leave the harness's connection silent for minutes, and the
// clients harnesses use give up on a silent stream: an HTTP read timeout (httpx's, the OpenAI and Anthropic
// SDKs'), a proxy's idle timeout, an agent's own stream timer. So once a streamed call has waited
// `--stream-keepalive` seconds for the upstream, its head goes out (200, text/event-stream) and a comment
// line (": keep-alive") every period after; the answer's events follow when it is there, the same bytes
// as without the comments. Every SSE reader skips comment lines (the WHATWG rules the OpenAI and Anthropic
// SDKs follow). A call answered within the period is sent exactly as before, head and events at once.
//
// What changes once the head is out: the status is sent, so a failure after it (the upstream down, its
// deadline) can no longer be a 5xx with Retry-After; it ends the stream with the API's error event instead
// (OpenAI: `data: {"error": {...}}` then `data: [DONE]`, as vLLM streams an error; Anthropic: `event:
// error`; Responses: `event: error` with code and message), which the SDKs raise as an error. Nothing
// recorded is lost either way, and the harness's retry gets the stored answer as before. Not covered: a call
// waiting for its session's lock (a retry behind the same session's call in flight) and the connect and
// backoff waits before the upstream's answer starts.
#include <string>
#include <string_view>

#include "server/gateway/gateway_error.h"
#include "server/metrics.h"
#include "server/router.h"

namespace crl::server::gateway {

class StreamKeepalive {
 public:
  // The error event's shape: the API the call came in.
  enum class Api { kOpenAi, kAnthropic, kResponses };
  // `begin`: the transport's (HttpCall::begin_answer; null: this transport cannot begin early);
  // `period_s` <= 0: no keep-alive.
  // `metrics` (may be null) counts the calls that begin early and those that then fail.
  StreamKeepalive(const AnswerStarter* begin, double period_s, Api api, ServerMetrics* metrics = nullptr)
      : begin_(begin), period_s_(period_s), api_(api), metrics_(metrics) {}

  // Whether the upstream should wake every period_s() for beat(): a transport that can begin, a period,
  // and a streamed call (want(): its request asked for a stream).
  bool active() const { return begin_ != nullptr && *begin_ && period_s_ > 0 && wanted_; }
  void want() { wanted_ = true; }
  double period_s() const { return period_s_; }
  // Another period passed without the upstream's answer: the first beat sends the head, every beat a
  // comment line. A client that went away stops the comments; the call goes on and is recorded.
  void beat();
  bool begun() const { return begun_; }
  // A failure once the stream has begun: the API's error event as the rest of the body. (A success needs
  // nothing: its events are the rest of the body as they are.)
  HttpAnswer error_event(const GatewayError& error) const;

 private:
  const AnswerStarter* begin_;
  double period_s_;
  Api api_;
  ServerMetrics* metrics_;
  bool wanted_ = false;
  bool begun_ = false;
  bool client_gone_ = false;
  BodyWriter write_;
};

}  // namespace crl::server::gateway
