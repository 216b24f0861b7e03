#pragma once
// One call of a harness as the session sees it, whatever API carried it (openai_codec.h, anthropic_codec.h).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/gateway/chat_messages.h"
#include "server/gateway/tool_choice.h"

namespace crl::server::gateway {

class StreamKeepalive;
class LiveAnswer;

// One call of a harness, whatever API carried it.
struct ChatTurn {
  std::vector<Message> messages;
  std::vector<uint64_t> keys;    // message_key of each message when the decoder computed them (else empty)
  nlohmann::ordered_json tools;  // null or the OpenAI tools list, keys in the request's order
  std::optional<uint64_t> tools_key;  // tools_key(tools) when the decoder computed it
  int64_t max_tokens = 0;             // 0: the budget decides alone
  std::optional<double> temperature, top_p;
  std::optional<int> top_k;
  std::string routing_key;            // X-SMG-Routing-Key from the harness, else the session id
  std::vector<std::string> stop;      // stop strings, passed upstream
  std::optional<std::string> prompt;  // a plain completion: the whole text so far (messages unused)
  bool prompt_ids = false;            // the answer shows the forwarded prompt's ids (return_token_ids)
  int top_logprobs = 0;               // alternatives per sampled token to ask the upstream for
  std::string json_schema;            // structured output (response_format): the schema's JSON text, or empty
  ToolChoice tool_choice;             // how the answer's tool calls are read, or forced (tool_choice.h)
  std::string template_kwargs;        // vLLM's and SGLang's chat_template_kwargs as JSON text, or empty
  // A streamed call's keep-alive while the upstream samples (stream_keepalive.h), for this call only; null:
  // none.
  StreamKeepalive* keepalive = nullptr;
  // A streamed call whose answer goes out as the upstream samples it (live_answer.h); null: sent whole.
  LiveAnswer* live = nullptr;
  // A chained Responses call's messages borrowed from its session's response chain (response_chain.h): the
  // line they came from (0: none are borrowed), where they sit in `messages`, and how many. Kept with the
  // call, not the chain: calls of several conversations may each hold a loan at once.
  struct BorrowedLine {
    uint64_t line = 0;
    size_t at = 0, count = 0;
  } borrowed;
};

// What a call asks to see of its sampled tokens' log-probs (OpenAI's chat `logprobs`, the completions'
// `logprobs: K`, vLLM's `return_tokens_as_token_ids`; the K alternatives are ChatTurn::top_logprobs).
// Whatever it asks, the export records the sampled tokens' log-probs.
struct LogprobsAsk {
  bool on = false;
  bool token_ids = false;  // each token written "token_id:N" instead of its text
};

// A decoded call of any API: the turn and how to answer it.
struct CallRequest {
  ChatTurn turn;
  bool stream = false;
  bool include_usage = false;  // OpenAI's stream_options.include_usage
  LogprobsAsk logprobs;
  bool return_token_ids = false;  // vLLM's: the answer shows prompt_token_ids and token_ids
  bool show_reasoning = true;     // the answer shows the model's reasoning (Anthropic: only with thinking on)
  std::string model;
  // The Responses API's conversation state (response_chain.h): the response this call continues ("" when
  // the call holds its whole conversation), and how many of turn.messages lead it from `instructions` (not
  // carried on to the next response, as the API says).
  std::string previous_response_id;
  size_t instruction_messages = 0;
};

}  // namespace crl::server::gateway
