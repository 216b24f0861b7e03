#pragma once
// The two inference-server APIs the LLM policy speaks (PROTOCOL.md section 3), token-in, token-out:
//  * SGLang native `POST /generate`: {input_ids, sampling_params {max_new_tokens, temperature, top_p, top_k,
//    stop_token_ids, no_stop_trim, skip_special_tokens, sampling_seed}, return_logprob, logprob_start_len,
//    rid}; answer {text, output_ids, meta_info {finish_reason {type: stop|length|abort, ...},
//    output_token_logprobs: [[logprob, token_id, text|null], ...], prompt_tokens, completion_tokens,
//    cached_tokens, ...}}; with top_logprobs_num K also output_top_logprobs: [[[logprob, id, text|null],
//    ...], ...].
//  * OpenAI-compatible `POST /v1/completions` (vLLM, SGLang) with a token-id prompt: {model, prompt: [ids],
//    max_tokens, temperature, top_p, top_k, logprobs: 1, return_token_ids, seed, stop_token_ids,
//    skip_special_tokens, include_stop_str_in_output}; answer {choices: [{token_ids, text, finish_reason:
//    stop|length|abort, logprobs {token_logprobs, top_logprobs: [{text: logprob}, ...]}, prompt_token_ids
//    (vLLM 0.10.2 on: the prompt it ran)}], usage {prompt_tokens, completion_tokens}} (logprobs: K asks for
//    K alternatives).
// The sampled ids and their log-probs are read exactly as the server sent them; nothing is re-tokenised.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/context.h"
#include "engine/json_view.h"
#include "engine/rng.h"
#include "engine/token.h"

namespace crl::llm {

enum class ApiKind { kSglang, kOpenAi };
// "sglang" | "openai"; throws crl::Error naming `where` otherwise.
ApiKind parse_api_kind(const std::string& name, const std::string& where);
const char* api_kind_name(ApiKind kind);
const char* api_path(ApiKind kind);  // "/generate" | "/v1/completions"

struct SamplingParams {
  double temperature = 1.0;  // the paper's evaluation setting (spec 1.1)
  double top_p = 1.0;
  int top_k = -1;  // -1: off
  std::vector<TokenId> stop_token_ids;
  // Stop strings (SGLang sampling_params.stop, OpenAI stop); omitted from the request when empty. Both
  // requests keep the matched string in the answer (no_stop_trim, include_stop_str_in_output), so the
  // returned ids are everything sampled.
  std::vector<std::string> stop;
  std::string model;  // the OpenAI API's `model` (omitted when empty)
  // Alternatives per sampled token to ask for (0: none, the default). SGLang: top_logprobs_num; OpenAI:
  // logprobs (at least the 1 the sampled tokens' log-probs need).
  int top_logprobs = 0;
  // Structured output: empty, or the JSON text (valid JSON: it is written into the OpenAI request as it is)
  // of a JSON schema every sampled answer must match (the server's constrained decoding). SGLang:
  // sampling_params.json_schema (the text); OpenAI API: response_format {"type": "json_schema",
  // "json_schema": {"name", "schema"}} (vLLM and SGLang).
  std::string json_schema;
};

struct GenerateCall {
  const PromptView* prompt = nullptr;  // written straight from the context's spans
  int64_t max_new_tokens = 0;
  uint64_t sampling_seed = 0;
  std::string rid;  // request id (SGLang `rid`, logged by the server)
  // When not empty: the JSON text of the prompt's id list ("[1,2,3]"), written instead of encoding `prompt`
  // again (the gateway keeps it per session and appends only the new ids: server/gateway/prompt_ids_text.h).
  std::string_view prompt_ids_json = {};
  // Ask for the answer as a stream of events (streamed_answer.h reads it): SGLang's "stream": true; the
  // OpenAI API's "stream": true with stream_options.include_usage (the usage chunk names the prompt's
  // length).
  bool stream = false;
};

// One of the most likely tokens at a sampled position. SGLang names its id; the OpenAI API only its text
// (id -1), unless the text is vLLM's "token_id:N".
struct TopLogprob {
  TokenId id = -1;
  std::string text;  // the OpenAI API's key; empty from SGLang (decode the id)
  float logprob = 0;
};

struct GenerateResult {
  bool ok = false;
  std::string error;  // why the answer could not be used
  std::vector<TokenId> ids;
  std::vector<float> logprobs;
  std::string finish_reason;  // stop | length | abort
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::string weight_version;  // SGLang's meta_info.weight_version (string or number); empty when absent
  // With `top_logprobs` > 0 asked: the alternatives at each sampled position, as the server listed them
  // (SGLang meta_info.output_top_logprobs; OpenAI choices[0].logprobs.top_logprobs); else empty.
  std::vector<std::vector<TopLogprob>> top;
};

// Appends the request body to `out` (cleared first). Ids are written directly, without a JSON library.
void write_request(ApiKind kind, const GenerateCall& call, const SamplingParams& sampling, std::string& out);
// The same body in pieces, for a caller that keeps the prompt's id text (GenerateCall::prompt_ids_json) and
// sends it without copying it into one string (HttpClient::post_parts): head + ids + tail is byte for byte
// what write_request writes. `ids` views call.prompt_ids_json (empty when that is empty: the ids are then
// written at the end of `head`).
struct RequestParts {
  std::string head;
  std::string_view ids;
  std::string tail;
};
void write_request_parts(ApiKind kind, const GenerateCall& call, const SamplingParams& sampling,
                         RequestParts& out);
// Reads an answer body. Malformed JSON, missing fields, lengths that differ, ids outside [0, vocab_size)
// (when vocab_size > 0) or an unknown finish reason give ok = false with the reason. With `top_logprobs` > 0
// (what the request asked), the alternatives are read too: one list per sampled token, each entry well
// formed, at most top_logprobs + 1 of them (the OpenAI API adds the sampled token). With `sent` (the prompt
// the request carried), an answer that names the prompt it ran must name that one: its length (SGLang's
// meta_info.prompt_tokens, usage.prompt_tokens; 0 or absent: not checked) and its ids (vLLM's
// prompt_token_ids, return_token_ids; null or absent: not checked). An upstream that cut or re-tokenized
// the prompt fails the call, since the caller would record a prompt the policy did not see.
struct SentPrompt {
  const PromptView* ids = nullptr;  // null: nothing is checked
  // The ids' JSON text as the request carried it (GenerateCall::prompt_ids_json), when the caller keeps it:
  // an answer that writes them back the same way (vLLM does) is checked by comparing bytes (about 45 KB at
  // 8k tokens) instead of reading every id.
  std::string_view ids_json;
};
// `partial`: the body is one event of a stream (streamed_answer.h), whose finish_reason is null
// (finish_reason
// "") until its last; an OpenAI stream's usage chunk (no choices) and a chunk without tokens or log-probs
// are read too.
GenerateResult parse_response(ApiKind kind, std::string_view body, int vocab_size, int top_logprobs = 0,
                              SentPrompt sent = {}, bool partial = false);
// The per-token lists parse_response reads as rows of numbers (engine/json_view.h, JsonNumberRows), in the
// shapes the servers write: SGLang's output_ids and output_token_logprobs, the OpenAI API's token_ids,
// logprobs.token_logprobs, prompt_token_ids and logprobs.text_offset. Any other shape is read from the
// document, with the same checks.
std::vector<JsonNumberRows> answer_number_rows(ApiKind kind);
// The arrays parse_response checks as JSON but does not read (JsonDocument::parse's `unread_arrays`): the
// OpenAI API's per-token texts, and its alternatives unless `top_logprobs` asked for them.
std::span<const std::string_view> answer_unread_arrays(ApiKind kind, int top_logprobs);

// The request seed of a stream (spec section 5): the first 8 bytes of SHA-256 over
// "crl-sampling|<seed>|<task>|<sample>|<role>|<ordinal>", masked to 63 bits. Identical for paired runs.
uint64_t sampling_seed(const StreamKey& stream);

}  // namespace crl::llm
