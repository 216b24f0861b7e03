#pragma once
// The gateway's OpenAI answers: `chat.completion` and `text_completion` objects, or with `stream: true` their
// server-sent events (`chat.completion.chunk` / `text_completion` chunks ended by `data: [DONE]`, sse.h), and
// errors as {"error": {...}}; with what a call asked to see of its tokens (AnswerExtras). Written by hand,
// byte for byte nlohmann's dump of the same objects, log-probs aside (answer_writer.h: Python's layout).
//
// Log-probs: one entry per sampled token, the ids and log-probs the export records (an end-of-turn token
// and a matched stop string's tokens included, so the entries are `usage.completion_tokens` long and line
// up with the trained tokens). A token's text is what the tokenizer decodes it to alone (special tokens as
// their strings); a token that is part of a UTF-8 character shows U+FFFD in `token` and its own bytes in
// `bytes`; `text_offset` counts the characters of the tokens as written. A stream carries every entry on
// its first chunk with sampled text (the content, else the first tool call, else the finish chunk).
// Alternatives come from the upstream (SGLang top_logprobs_num with ids, decoded here; the OpenAI API's
// top_logprobs text keys, used as they are), are asked for execution calls only (a summary never), and a
// retry answers those its first call was sampled with.
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "server/gateway/chat_turn.h"
#include "server/gateway/gateway_error.h"
#include "server/gateway/gateway_session.h"
#include "server/gateway/stream_shown.h"

namespace crl::server::gateway {

// One alternative at a sampled position: its text (as a token is written) and log-prob.
struct Alternative {
  std::string token;
  float logprob = 0;
};

// The sampled tokens of an answer as its `logprobs` shows them.
struct TokenLogprobs {
  std::vector<std::string> tokens;            // each token's bytes as decoded alone, or "token_id:N"
  std::span<const float> logprobs;            // the completion's
  std::vector<std::vector<Alternative>> top;  // per token when alternatives were asked (else empty)
};
// What `ask` asks to see of `completion`'s tokens; nullopt when it asks nothing.
std::optional<TokenLogprobs> token_logprobs(const Completion& completion, LogprobsAsk ask,
                                            const Tokenizer& tokenizer);

// The sampled tokens as a JSON list: [{"bytes":[..],"logprob":X,"token":T,"top_logprobs":[{"bytes":[..],
// "logprob":Y,"token":U},..]},..] (chat's logprobs.content, Responses' output_text logprobs); `bytes`
// false: every entry and alternative without "bytes" (the Responses stream events' logprobs).
void put_token_logprobs(std::string& out, const TokenLogprobs& logprobs, bool bytes);

// What a call asked its answer to carry besides the message (nothing: the plain OpenAI answer).
struct AnswerExtras {
  const TokenLogprobs* logprobs = nullptr;  // null: "logprobs": null
  // vLLM's return_token_ids: the sampled ids (`token_ids`) and the forwarded prompt's (`prompt_token_ids`:
  // the window the policy saw, Completion::prompt_ids). Chat answers carry prompt_token_ids at the top level
  // (a stream: on its first chunk) and token_ids in the choice (a stream: with the log-prob entries);
  // completions carry both in the choice (a stream: on its first chunk).
  bool token_ids = false;
};

std::string chat_completion_json(const Completion& completion, const std::string& model,
                                 const AnswerExtras& extras = {});
// The same answer as server-sent events: a role chunk, a content chunk, one chunk per tool call, the finish
// chunk, the usage chunk when asked, then `data: [DONE]`.
// `shown`: what already went out live; the chunks are then the rest (no role chunk, the texts' rest).
std::string chat_completion_sse(const Completion& completion, const std::string& model, bool include_usage,
                                const AnswerExtras& extras = {}, const StreamShown& shown = {});
// The chunks a chat stream sends while its answer is sampled (live_answer.h), appended to `out`: the role
// chunk when `open` (the stream's first), then a reasoning_content chunk and a content chunk for the texts
// that are not empty. `header` gives the id and time.
void chat_completion_delta(std::string& out, const Completion& header, const std::string& model,
                           bool include_usage, bool open, std::string_view reasoning,
                           std::string_view content);
// A plain completion: a `text_completion` object, or its stream (one text chunk, the finish chunk, the usage
// chunk when asked, `data: [DONE]`).
std::string text_completion_json(const Completion& completion, const std::string& model,
                                 const AnswerExtras& extras = {});
std::string text_completion_sse(const Completion& completion, const std::string& model, bool include_usage,
                                const AnswerExtras& extras = {}, const StreamShown& shown = {});
// A plain completion's text chunk sent while it is sampled (nothing for empty text).
void text_completion_delta(std::string& out, const Completion& header, const std::string& model,
                           bool include_usage, std::string_view text);
std::string openai_error_json(const GatewayError& error);

}  // namespace crl::server::gateway
