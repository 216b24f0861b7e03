#pragma once
// A stand-in LLM inference server for tests and benchmarks: a real HTTP/1.1 server (Boost.Beast) on loopback
// that speaks SGLang's `POST /generate` and the OpenAI-compatible `POST /v1/completions` with the real JSON
// shapes, backed by a deterministic scripted model of the synthetic suite.
//
// The scripted model decodes the prompt with the tokenizer and reads it like a careful agent would: the task
// type and tracked key from the instruction (or from an earlier summary), the records it has seen (lines
// "#NN/16 ref ... | KIND key=value |"), and the facts an earlier summary kept. It answers `next` until the
// last observation is END, then `submit <answer>`; asked for a summary it writes
// "task=<type> key=<key> read=<n> facts=<record>:<value>,..." keeping the facts the answer needs, or, on
// purpose, dropping them (SummaryMode). Its answer is tokenised, ended with <|im_end|>, cut at max_new_tokens
// (finish reason length) and given log-probs that are a pure function of (sampling seed, position, token) and
// exactly representable as floats, so a test can compare them bit for bit.
//
// Fault injection, all deterministic: a fixed delay; the first N attempts of each distinct request body
// answered 503 or dropped (closed without an answer), so retries succeed; requests whose sampling seed is
// selected by `sticky_every` always get `sticky_fault` (5xx, drop, malformed JSON, hang past any deadline,
// 400, or an abort finish reason). A hold keeps answers until a given number of requests is in at once.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/tokenizer.h"

namespace crl::testing {

enum class SummaryMode { kKeep, kDrop, kSeeded };  // seeded: drop when the sampling seed is odd

struct FaultOptions {
  double delay_s = 0;
  int transient_5xx = 0;      // the first N attempts of each distinct request body get 503
  int transient_drops = 0;    // ... or are closed without an answer
  uint64_t sticky_every = 0;  // requests with sampling_seed % sticky_every == 0 always get sticky_fault
  // 5xx | drop | malformed | hang | 400 | abort | truncate (the answer names the prompt without its first
  // id, as a server that cut the prompt answers: its prompt_tokens, and the OpenAI API's prompt_token_ids);
  // for a streamed SGLang answer also stream_cut (the connection closed after half the events) and
  // stream_error (SGLang's {"error": {"message"}} event in place of the second half, then [DONE]).
  std::string sticky_fault;
  double hang_s = 30;
  // Answers wait until this many requests are inside the server at once (then all go, and nothing waits
  // again), at most hold_s: a test sees how many calls reach the upstream together. 0: off.
  int hold_until_in_flight = 0;
  double hold_s = 60;
};

struct ScriptedLlmOptions {
  uint16_t port = 0;  // 0: an ephemeral port
  FaultOptions faults;
  SummaryMode summary = SummaryMode::kKeep;
  std::shared_ptr<const Tokenizer> tokenizer;  // default: ByteTokenizer
  bool log_calls = true;                       // keep every answered call (tests); benchmarks turn it off
  // GET /v1/models answers one model, as vLLM does: this id, and this max_model_len (0: an entry without
  // one, as servers that do not say their context answer).
  std::string model_id = "scripted";
  int64_t max_model_len = 131072;
  // Replaces the scripted model (the gateway's tests script their own harness): the answer text for the
  // decoded prompt; <|im_end|> is appended and the answer cut at max_new_tokens as for the scripted model.
  std::function<std::string(std::string_view prompt_text, uint64_t seed)> script;
  // A request with "stream": true is answered as the server streams: text/event-stream, an event per token
  // ("data: {...}\n\n"), then "data: [DONE]" (the OpenAI API: vLLM's chunks, a usage chunk first when
  // stream_options.include_usage). SGLang's /generate: by default each event is the answer so far (its
  // default); `incremental_stream`: only the new token (its --incremental-streaming-output). The events go
  // out this far apart (a test sees the first before the last is sampled), and an answer asked whole waits
  // as long as its stream would take (its tokens' sampling time) on top of faults.delay_s.
  bool incremental_stream = false;
  double stream_event_delay_s = 0;
};

// One answered call, as the server saw and answered it.
struct LoggedCall {
  std::string api;  // sglang | openai
  std::vector<TokenId> prompt;
  int64_t max_new_tokens = 0;
  uint64_t sampling_seed = 0;
  std::vector<TokenId> output;
  std::vector<float> logprobs;
  std::string finish_reason;
  std::string rid;
  std::string routing_key;        // the X-SMG-Routing-Key header
  std::vector<std::string> stop;  // stop strings asked for (SGLang sampling_params.stop, OpenAI stop)
  // Stop token ids asked for (SGLang sampling_params.stop_token_ids, vLLM's stop_token_ids): the answer
  // ends at the first of them, which it keeps, as those servers answer.
  std::vector<TokenId> stop_token_ids;
  // Alternatives asked per token (SGLang top_logprobs_num; OpenAI logprobs, at least 1) and those answered,
  // most likely first (scripted_top).
  int top_logprobs = 0;
  std::vector<std::vector<std::pair<TokenId, float>>>
      top;  // The structured output asked (SGLang sampling_params.json_schema; OpenAI response_format
            // json_schema's
  // schema, or {"type":"object"} for json_object), as JSON text; empty when none. Not enforced here.
  std::string json_schema;
};

// The scripted model on decoded prompt text (exposed for unit tests).
std::string scripted_answer(std::string_view prompt_text, SummaryMode mode, uint64_t seed);
// The k most likely tokens the scripted model reports at a sampled position: the sampled token, then k - 1
// printable ASCII ids, each half a nat less likely than the one before.
std::vector<std::pair<TokenId, float>> scripted_top(TokenId sampled, float logprob, int k);
// The log-prob the scripted model reports for `token` at `position` (a multiple of 1/1024 in [-4, 0)).
float scripted_logprob(uint64_t seed, size_t position, TokenId token);

class ScriptedLlmServer {
 public:
  // Listens on 127.0.0.1 (options.port, or an ephemeral port) and serves on its own thread until destroyed.
  explicit ScriptedLlmServer(ScriptedLlmOptions options = {});
  ~ScriptedLlmServer();
  ScriptedLlmServer(const ScriptedLlmServer&) = delete;
  ScriptedLlmServer& operator=(const ScriptedLlmServer&) = delete;

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<LoggedCall> calls() const;
  uint64_t attempts() const { return attempts_; }  // HTTP requests received, faults included
  uint64_t connections() const { return connections_; }
  uint64_t peak_in_flight() const { return peak_in_flight_; }  // most requests inside at once
  void clear_log();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  std::thread thread_;
  uint16_t port_ = 0;
  std::atomic<uint64_t> attempts_{0}, connections_{0}, peak_in_flight_{0};
  friend struct Impl;
};

}  // namespace crl::testing
