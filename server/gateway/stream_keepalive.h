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
// (OpenAI: `data: {"error": {...}}` then `data: [DONE]`, as vLLM streams an error, which the OpenAI SDK
// raises as an APIError; Anthropic: `event: error`, which its SDK raises; Responses: `event: error` with
// code and message, then `response.failed` with the failed response, whose `error` Codex CLI reports and
// retries on, where it skips an `error` event and would only see a stream closed early). Nothing
// recorded is lost either way, and the harness's retry gets the stored answer as before.
//
// Every wait of a streamed call beats: the wait for its session's lock, for its thread of the session (a
// retry behind its first try in flight) or its Responses line (FiberMutex::lock(Heartbeat&)), the upstream's
// connect, the request's send, a retry's
// backoff and the answer (Upstream::exchange), and each upstream call of the turn (a summary request, then
// the turn's). The period counts from the call's start, across all of them.
#include <chrono>
#include <string>
#include <string_view>

#include "server/fiber_mutex.h"
#include "server/gateway/gateway_error.h"
#include "server/metrics.h"
#include "server/router.h"

namespace crl::server::gateway {

class StreamKeepalive final : public Heartbeat {
 public:
  // The error event's shape: the API the call came in.
  enum class Api { kOpenAi, kAnthropic, kResponses };
  // `begin`: the transport's (HttpCall::begin_answer; null: this transport cannot begin early);
  // `period_s` <= 0: no keep-alive.
  // `metrics` (may be null) counts the calls that begin early and those that then fail.
  StreamKeepalive(const AnswerStarter* begin, double period_s, Api api, ServerMetrics* metrics = nullptr,
                  std::string_view model = {});

  // Whether the call's waits should wake for beat(): a transport that can begin, a period, and a streamed
  // call (want(): its request asked for a stream).
  bool active() const {
    return begin_ != nullptr && *begin_ && period_ > std::chrono::steady_clock::duration::zero() && wanted_;
  }
  void want();
  // The model a failed Responses call names (response.failed's response); by default the gateway's.
  void set_model(std::string_view model) { model_ = model; }  // (a copy: the request is gone by then)
  // When the next beat is due: a period after want() (the call's start, give or take its decoding), then
  // after the last beat; never when not active().
  std::chrono::steady_clock::time_point due() const override;
  // Another period passed without the answer: the first beat sends the head, every beat a comment line. A
  // client that went away stops the comments; the call goes on and is recorded.
  void beat() override;
  bool begun() const { return begun_; }
  // Whether the call can send its events before its handler returns (live_answer.h): a transport that can
  // begin, and a streamed call (want()).
  bool can_send() const { return begin_ != nullptr && *begin_ && wanted_; }
  // Sends events now (can_send() must hold): the head first when the stream has not begun. The next beat is
  // a period after them. A client that went away gets nothing more; the call goes on and is recorded.
  void send(std::string_view events);
  // A failure once the stream has begun: the API's error event as the rest of the body. (A success needs
  // nothing: its events are the rest of the body as they are.)
  HttpAnswer error_event(const GatewayError& error) const;

 private:
  // Writes a piece of the body, the head first when the stream has not begun (`begins`, if not null, counts
  // the streams begun so); nothing once the client went away.
  void write(std::string_view piece, Counter* begins);

  const AnswerStarter* begin_;
  Api api_;
  ServerMetrics* metrics_;
  std::chrono::steady_clock::duration period_{};
  std::chrono::steady_clock::time_point next_beat_{};
  std::string_view default_model_;  // the gateway's, which outlives the call
  std::string model_;
  bool wanted_ = false;
  bool begun_ = false;
  bool client_gone_ = false;
  BodyWriter write_;
};

}  // namespace crl::server::gateway
