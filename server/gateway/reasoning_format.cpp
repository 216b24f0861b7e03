#include "server/gateway/reasoning_format.h"

#include "engine/error.h"
#include "server/gateway/chat_messages.h"

namespace crl::server::gateway {

ReasoningFormat resolve_reasoning_format(std::string_view name, const Tokenizer& tokenizer) {
  if (name == "auto")
    return tokenizer.special_token("</think>") ? ReasoningFormat::kThink : ReasoningFormat::kNone;
  if (name == "none") return ReasoningFormat::kNone;
  for (const std::string_view think : {"think", "qwen3", "qwen3-thinking", "deepseek_r1", "deepseek-r1"}) {
    if (name == think) return ReasoningFormat::kThink;
  }
  throw Error("option --reasoning-parser", "",
              "value " + quote(name) +
                  " is not one of auto, none, think (or qwen3, qwen3-thinking, deepseek_r1, deepseek-r1)");
}

SplitAnswer split_reasoning(ReasoningFormat format, std::string_view text) {
  static constexpr std::string_view kOpen = "<think>", kClose = "</think>";
  if (format == ReasoningFormat::kNone) return {{}, text};
  const std::string_view opened = trim_blanks(text);
  const bool opens = opened.starts_with(kOpen);
  const size_t close = text.find(kClose);
  if (close == std::string_view::npos) {
    if (!opens) return {{}, text};
    return {trim_blanks(opened.substr(kOpen.size())), {}};  // cut while thinking
  }
  std::string_view reasoning = text.substr(0, close);
  if (opens) reasoning = trim_blanks(reasoning).substr(kOpen.size());
  return {trim_blanks(reasoning), trim_blanks(text.substr(close + kClose.size()))};
}

}  // namespace crl::server::gateway
