#pragma once
// A reasoning model's thinking, kept out of the content a harness acts on, as vLLM's and SGLang's
// `--reasoning-parser` keep it (`crl serve --reasoning-parser auto|none|think`):
//
//  think  Qwen3, QwQ, DeepSeek-R1 (vLLM and SGLang call it qwen3, qwen3-thinking, deepseek_r1,
//         deepseek-r1; all are taken): the text up to the first "</think>", less a leading "<think>", is the
//         reasoning, the text after it (less the blank lines that follow the tag) the content. An answer that
//         opens "<think>" and never closes it (cut by max_tokens) is all reasoning; one with neither tag (a
//         template that turned thinking off) all content.
//  none   the text is the content, as sampled.
//
// `auto` (the default) is think when the tokenizer has "</think>" as a token of its own (the models that
// are trained to think have it so), else none. gpt-oss's harmony answers carry their reasoning on the
// analysis channel whatever this says (tool_call_format.h).
//
// Tool calls are read from the content only: a call written while thinking is not a call. The reasoning
// reaches a chat-completions harness as `message.reasoning_content` (an Anthropic harness that enables
// thinking as a thinking block, a Responses harness as a reasoning item; and a stream's
// `delta.reasoning_content` chunk); it is not part of the key that recognises the harness's copy of the
// answer (harnesses copy it back or not). The window keeps the answer as sampled, thinking included.
#include <string_view>

#include "engine/tokenizer.h"

namespace crl::server::gateway {

enum class ReasoningFormat { kNone, kThink };

// "auto", "none", "think" or one of vLLM's and SGLang's names for think. Throws crl::Error naming the option
// and the names it takes.
ReasoningFormat resolve_reasoning_format(std::string_view name, const Tokenizer& tokenizer);

struct SplitAnswer {
  std::string_view reasoning, content;  // views into the text
};
SplitAnswer split_reasoning(ReasoningFormat format, std::string_view text);

}  // namespace crl::server::gateway
