#pragma once
// Sampling from the language model with a key-value cache (CPU reference).
//
// Each sequence keeps, per layer, the keys and values of every position it has seen, so a new token costs
// one row through the network plus attention over the cached rows instead of a forward pass over the whole
// prefix. sample() advances all unfinished sequences of a batch by one token per round.
//
// Determinism (DESIGN.md rule 5): a request draws only from its own stream (Rng(request.stream), one
// uniform per sampled token), and every row is computed alone with the same arithmetic whatever else is in
// the batch, so the same request gives the same tokens and bit-identical log-probs however requests are
// grouped into batches. (Grouping rows into one GEMM is faster but Eigen's kernels may sum a row in a
// different order depending on the batch's shape; that optimisation waits for a row-invariant kernel.)
//
// Returned log-probs are those of the model itself (temperature 1, no top-p): the behaviour log-probs that
// a trainer recomputes with forward(). Temperature 0 is greedy (the lowest id among equal maxima) and uses
// no random draw. top_k > 0 keeps the k most likely tokens (ties broken by lower id); top_p then keeps the
// smallest set of the most likely remaining tokens whose probability (after temperature, renormalised over
// what top_k kept: the order of Hugging Face's warpers and vLLM) reaches top_p (at least one token), then
// samples among them.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/rng.h"
#include "engine/tokenizer.h"
#include "policies/lm/cpu/model.h"

namespace crl::lm {

// One sequence's keys and values per layer, [position x d_model] each.
class KvCache {
 public:
  explicit KvCache(const LmConfig& config);
  int length() const { return length_; }
  // Feeds one token at position length() and returns the logits of the next token (vocab entries).
  // Throws std::invalid_argument when the token is out of range or the cache is full (max_positions).
  const RowVector& push(const LmModel& model, int32_t token);
  // push() without the logits: a prompt's tokens before its last need none (skipping their vocabulary
  // projection saved about 4% of an RL probe's CPU; bench/RESULTS.md). logits() computes them when asked,
  // from the same hidden state with the same operations, so the bits do not depend on which of the two fed
  // the token.
  void advance(const LmModel& model, int32_t token);
  // The final normed hidden state of the last fed token (what the value head and the logits read).
  const RowVector& hidden() const { return a_; }
  // The logits of the next token after the last fed one (empty before the first), computed on first use
  // after advance() with the model that fed it (which must still be alive and unchanged).
  const RowVector& logits();

 private:
  std::vector<RowMatrix> keys_, values_;
  int length_ = 0;
  const LmModel* stale_ = nullptr;  // the model whose logits are not computed yet, after advance()
  RowVector x_, a_, qkv_, attn_, scores_, u_, logits_;
};

struct SamplingParams {
  float temperature = 1.0f;       // >= 0; 0 = greedy
  float top_p = 1.0f;             // (0, 1]
  int top_k = 0;                  // <= 0: off (SGLang's -1, vLLM's 0 and -1)
  int max_new_tokens = 64;        // >= 0
  std::vector<int32_t> stop_ids;  // sampling ends after one of these (it is included in the output)
  // Sampling ends after the token with which the decoded new text first contains one of these strings
  // (however many tokens the string spans; the tokens are all kept, SampleResult says where the string
  // starts). Needs `tokenizer`, which decodes the new tokens one by one (byte-level tokenizers decode a
  // sequence as the concatenation of its tokens). Checked after the stop ids.
  std::vector<std::string> stop_strings;
  const Tokenizer* tokenizer = nullptr;
  int top_logprobs = 0;  // >= 0: also return the this many most likely tokens of each step (model log-probs)
};

struct SampleRequest {
  std::vector<int32_t> prompt;  // non-empty
  StreamKey stream;             // the request's own random stream
  // >= 0: also return the model's log-prob of each prompt token from this position on (SGLang's
  // logprob_start_len); must be below the prompt's length. -1: none.
  int prompt_logprobs_from = -1;
};

enum class FinishReason { kStop, kLength, kContext };

struct SampleResult {
  std::vector<int32_t> tokens;  // the new tokens only
  std::vector<float> logprobs;  // the model's log-prob of each new token
  FinishReason finish = FinishReason::kLength;
  // kStop by a stop string: its index in stop_strings and where it starts in `text`; -1 otherwise.
  int stop_string = -1;
  int64_t stop_offset = -1;
  std::string text;  // the decoded new tokens (only with a tokenizer)
  // top_logprobs > 0: per new token, the most likely (id, log-prob) pairs, best first (lower id on ties).
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  // prompt_logprobs_from >= 0: the log-prob of prompt tokens prompt_logprobs_from .. end given the tokens
  // before each (position 0 has no context: NaN there), and with top_logprobs > 0 the most likely tokens
  // at each of those positions (empty at position 0).
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> prompt_top;
};

// Watches sampling as it goes (a server streaming tokens as they are sampled, policies/lm/serve.h): called
// after each sampling round, `step` = the index of the token each sequence still going has just sampled,
// with the results so far (their tokens, log-probs, text and top tokens up to that token) and, per
// sequence, whether it is finished (its result is final: a stop, the token limit, the context). A sequence
// that finished in an earlier round is not in this round (its tokens end before `step`). Returning false
// stops sampling there: the results so far are returned, unfinished ones with finish kLength. Observing
// changes no token, draw or log-prob.
using SampleObserver =
    std::function<bool(int step, std::span<const SampleResult> results, std::span<const char> finished)>;

// Throws std::invalid_argument naming the field for bad parameters or prompts.
std::vector<SampleResult> sample(const LmModel& model, std::span<const SampleRequest> requests,
                                 const SamplingParams& params, const SampleObserver& observer = {});

// Where the next-token logits come from: one sequence per slot (slot r = request r), each fed one token at
// a time. The CPU's is a KvCache per slot; the CUDA twin's keeps the caches on the device and advances all
// the slots of a round in one pass (policies/lm/cuda/lm_cuda.h, cuda_sample).
class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  // Feeds tokens[i] to slot slots[i] (distinct slots, each below max_positions) at that slot's next
  // position, and sets logits[slots[i]] to the slot's next-token logits.
  virtual void push(std::span<const int> slots, std::span<const int32_t> tokens,
                    std::vector<RowVector>& logits) = 0;
  virtual int length(int slot) const = 0;  // tokens fed to the slot so far
};

// The checks sample() makes (std::invalid_argument naming the field), for back-ends that must refuse bad
// input before they allocate anything.
void check_sampling(const LmConfig& config, std::span<const SampleRequest> requests,
                    const SamplingParams& params);

// sample() on the logits of `decoder` (one slot per request, all empty), after check_sampling(). Round t of
// the prompts feeds token t of every prompt that has one; each sampling round feeds the token just sampled
// of every sequence that goes on. The tokens, stops and random draws are the same whatever the decoder.
std::vector<SampleResult> sample_with(TokenDecoder& decoder, const LmConfig& config,
                                      std::span<const SampleRequest> requests, const SamplingParams& params,
                                      const SampleObserver& observer = {});

// One token from a logits row under the parameters (exposed for tests); rng is used only when temperature >
// 0.
int32_t pick_token(const RowVector& logits, const SamplingParams& params, Rng& rng);

}  // namespace crl::lm
