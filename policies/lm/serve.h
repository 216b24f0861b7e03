#pragma once
// The language model over the two inference APIs the engine's LLM policy speaks (policies/llm/llm_api.h), so
// `crl rollout`, POST /v1/rollouts, external trainers and other tools run against a model trained here
// (`crl lm serve`, cli/lm_command.cpp, puts this behind the engine's HTTP server). Transport-free: tests call
// handle() directly.
//
//   POST /v1/completions  OpenAI / vLLM: prompt (text, token ids, or a list of either), max_tokens (16),
//                         temperature (1), top_p (1), n (1..16), seed (0), stop (string or up to 16 strings),
//                         stop_token_ids, logprobs (0..20: token_logprobs, tokens, text_offset,
//                         top_logprobs), include_stop_str_in_output (false), return_token_ids (adds
//                         prompt_token_ids; the sampled `token_ids` of each choice are always returned, as
//                         vLLM does with it), echo (false only), stream, stream_options {include_usage,
//                         continuous_usage_stats}, top_k (-1 or 0: off), and model, user,
//                         skip_special_tokens, ignored. Answer: {id, object "text_completion", created 0,
//                         model, choices [{index, text, logprobs, finish_reason stop|length, stop_reason,
//                         token_ids}], usage}. Errors: OpenAI's {"error": {message, type
//                         "invalid_request_error", param, code}} with status 400 (404 for another path).
//   POST /generate        SGLang: input_ids (ids or a list of id lists) or text (string or list),
//                         sampling_params {max_new_tokens (128), temperature, top_p, top_k (-1 or 0: off),
//                         stop, stop_token_ids, no_stop_trim (false), sampling_seed (0), skip_special_tokens,
//                         ignore_eos, ignored}, return_logprob, logprob_start_len (-1: no prompt log-probs;
//                         s: prompt positions s .. end, s below the prompt's length), top_logprobs_num,
//                         return_text_in_logprobs, rid. Answer (a list for a list input): {text, output_ids,
//                         meta_info {id, finish_reason {type "stop", matched: string|id} | {type "length",
//                         length}, prompt_tokens, completion_tokens, cached_tokens 0, and with return_logprob
//                         input_token_logprobs and output_token_logprobs [[logprob, id, text|null]] (the
//                         first prompt token's logprob null: it has no context), input_top_logprobs and
//                         output_top_logprobs with top_logprobs_num}}. Errors: SGLang's {"error":
//                         {"message"}} with status 400.
//   GET /v1/models, GET /get_model_info.
// Streaming (`stream: true` on either API) answers text/event-stream, `data: {...}` events ended by
// `data: [DONE]`, one event per sampled token of each choice / prompt, in token order, choices round-robin
// (choice 0's token t, choice 1's token t, ..., then token t + 1). OpenAI (vLLM's chunks): each choice's
// event holds the text its token adds (`text`: a delta; bytes of a character split across tokens wait for
// the token that completes it; never text past a stop string, so the deltas join to the non-streamed
// text), its `token_ids` [id], `logprobs` for that token (text_offset absolute) or null, and
// finish_reason / stop_reason null until the choice's last event; prompt_token_ids (with
// return_token_ids) in a choice's first event; with stream_options.include_usage every event has "usage":
// null (or, with continuous_usage_stats, that choice's counts so far) and a last event {choices: [],
// usage} precedes [DONE]; a choice with no tokens (max_tokens 0) has one event with text "". SGLang
// (its default, non-incremental mode): each event is the whole answer so far, {text, output_ids,
// meta_info} (finish_reason null until the last; output_token_logprobs so far), with "index" for a batch
// input. The events are written as the model samples (ServeAnswer::stream): each sampling round's events
// (token t of every choice still going) go to the client before token t + 1 is sampled, so a client sees its
// first token after one round, and a client that goes away stops the sampling at the next round. Text that
// may still become a stop string waits for the tokens that decide it (vLLM does the same), so nothing past a
// stop string is ever shown and the deltas join to the non-streamed text.
// Sampling is policies/lm/cpu/sampler.h: log-probs are the model's own (temperature 1, no top-p), i.e. what
// forward() recomputes; a request with the same seed gives the same bytes (choice i of a request draws from
// StreamKey{seed, 0, i, kExecute, 0}; item i of an SGLang batch likewise). Omitting the seed means seed 0.
// The model has no end-of-sequence token of its own: sampling stops at a stop id, a stop string, the token
// limit, or the context (max_positions; finish_reason "length"). A prompt longer than max_positions is a 400.
// `created` is 0 and the id is "cmpl-<seed>" so that answers are reproducible byte for byte.
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engine/tokenizer.h"
#include "policies/lm/backend.h"
#include "policies/lm/cpu/model.h"
#include "policies/lm/cpu/sampler.h"

namespace crl::lm {

// Writes one piece of a streamed body; false once the client can no longer receive it (stop producing).
using BodyWriter = std::function<bool(std::string_view piece)>;

struct ServeAnswer {
  int status = 200;
  std::string body;  // JSON (or, with `stream`, the body's first bytes: none)
  std::string content_type = "application/json";
  // Set for `stream: true`: produces the server-sent events, sampling as it writes (run it after the head
  // is sent, off the I/O thread; the request is already checked, so it always answers 200). Unset: `body`
  // is the whole answer.
  std::function<void(const BodyWriter&)> stream = {};
};

// The whole body of an answer, its stream run to the end (tests; clients that cannot take a chunked body).
std::string collect(const ServeAnswer& answer);

class LmService {
 public:
  // Throws crl::Error when the tokenizer's vocabulary is larger than the model's, and for kCuda when no
  // device is usable or the model uses rope (CPU-only).
  LmService(LmModel model, std::shared_ptr<const Tokenizer> tokenizer, std::string model_name,
            LmBackend backend = LmBackend::kCpu);
  // The answer for a request; nullopt for a path this service does not serve. Never throws.
  std::optional<ServeAnswer> handle(std::string_view method, std::string_view path,
                                    std::string_view body) const;

  const LmModel& model() const { return model_; }

 private:
  struct CompletionJob;
  ServeAnswer completions(std::string_view body) const;
  void stream_completions(const CompletionJob& job, const BodyWriter& write) const;
  static std::string final_text(const CompletionJob& job, const SampleResult& r);
  static nlohmann::ordered_json stop_reason(const CompletionJob& job, const SampleResult& r);
  static int64_t prompt_tokens(const CompletionJob& job);
  static nlohmann::ordered_json usage_json(int64_t prompt, int64_t completion);
  nlohmann::ordered_json logprobs_json(const CompletionJob& job, const SampleResult& r,
                                       const std::vector<size_t>& ends, size_t from, size_t to) const;
  ServeAnswer generate(std::string_view body) const;
  std::vector<SampleResult> run(std::span<const SampleRequest> requests, const SamplingParams& params,
                                const SampleObserver& observer = {}) const;

  LmModel model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::string name_;
  LmBackend backend_;
};

}  // namespace crl::lm
