#pragma once
// An answer streamed ("stream": true), read event by event as the server sends it, so a caller can show the
// sampled tokens while the rest are sampled (the gateway's streamed calls: server/gateway/live_answer.h).
//
// The OpenAI API (vLLM, SGLang's /v1/completions, `crl lm serve`): each chunk holds the tokens since the one
// before (choices[0].token_ids and logprobs, the prompt's ids on the first with return_token_ids),
// finish_reason null until the last; with stream_options.include_usage a last chunk without choices gives
// the usage. Read as parse_response reads a whole answer, chunk by chunk.
//
// SGLang's /generate: each event's data is an answer so far in /generate's shape (llm_api.h),
// meta_info.finish_reason null until the last. SGLang writes one of two kinds, and both are read:
//  * by default each event holds everything sampled so far: output_ids and output_token_logprobs (and
//    output_top_logprobs) from the first token, meta_info.completion_tokens their count;
//  * with `--incremental-streaming-output` each holds only the tokens since the event before; its
//    completion_tokens still counts them all.
// An event whose ids number completion_tokens is the first kind (it must repeat the ids already read), one
// whose ids and those read before number it the second; any other event contradicts the stream. (The first
// kind costs the server and the reader O(n^2) bytes over an answer of n tokens: a few MB at a thousand
// tokens; the flag is the cheaper choice for long answers.) The ids and log-probs kept are the server's, read
// as parse_response reads a whole answer (the same checks: ids in the vocabulary, the log-prob entries
// naming the same ids, the prompt's length). An event {"error": {"message": M}} (SGLang's stream when the
// request fails after its head) fails the answer with M.
#include <string>
#include <string_view>

#include "policies/llm/llm_api.h"

namespace crl::llm {

class StreamedAnswer {
 public:
  StreamedAnswer(ApiKind kind, int vocab_size, int top_logprobs, SentPrompt sent)
      : kind_(kind), vocab_size_(vocab_size), top_logprobs_(top_logprobs), sent_(sent) {}
  // One event's data (the SSE event's; "[DONE]" is the stream's end, not an event). False, with error(),
  // for an event that is not an answer so far, an error event, one that contradicts the events before, or
  // one after the last.
  bool add(std::string_view data);
  // The last event with tokens came (it named the finish reason; an OpenAI stream's usage chunk may follow).
  bool finished() const { return !answer_.finish_reason.empty(); }
  // The answer so far: its ids and log-probs; the finish reason and the counts once finished().
  const GenerateResult& answer() const { return answer_; }
  GenerateResult take() { return std::move(answer_); }
  const std::string& error() const { return error_; }

 private:
  bool refuse(std::string why);

  ApiKind kind_;
  int vocab_size_;
  int top_logprobs_;
  SentPrompt sent_;
  size_t events_ = 0;  // events read (for the errors' wording)
  GenerateResult answer_;
  std::string error_;
};

}  // namespace crl::llm
