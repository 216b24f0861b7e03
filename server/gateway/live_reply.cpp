#include "server/gateway/live_reply.h"

#include <algorithm>

#include "engine/utf8.h"

namespace crl::server::gateway {

namespace {
constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kToolCall = "<tool_call>", kDeepSeekCalls = "<｜tool▁calls▁begin｜>";

bool blank(char c) {
  return c == ' ' || c == '\n';
}  // (what trim_blanks trims)

std::string_view trim_front(std::string_view text) {
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  return text;
}
std::string_view trim_back(std::string_view text) {
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return text;
}

// The longest tail of `text` that begins `word` (a proper prefix of it; all of it too when `whole`).
size_t tail_beginning(std::string_view text, std::string_view word, bool whole) {
  const size_t longest = std::min(text.size(), whole ? word.size() : word.size() - 1);
  for (size_t n = longest; n > 0; --n) {
    if (text.substr(text.size() - n) == word.substr(0, n)) return n;
  }
  return 0;
}

// The bytes at the end of `bytes` that begin a character the next bytes may complete.
size_t unfinished_character(std::string_view bytes) {
  for (size_t back = 1; back <= std::min<size_t>(3, bytes.size()); ++back) {
    const size_t i = bytes.size() - back;
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x80) return 0;
    if (c >= 0xC0) {  // a lead byte: held when its sequence is cut short by the end only
      const Utf8Sequence sequence = utf8_sequence(bytes, i);
      return !sequence.valid && i + sequence.length == bytes.size() ? back : 0;
    }
  }
  return 0;
}
}  // namespace

LiveReply::LiveReply(LiveRules rules) : rules_(std::move(rules)) {
  if (rules_.tool_format == ToolCallFormat::kHarmony || rules_.choice.forced()) phase_ = Phase::kOff;
}

std::string_view LiveReply::settled() const {
  std::string_view text = text_;
  size_t held = 0;
  for (const std::string& stop : rules_.stop) {
    if (!stop.empty()) held = std::max(held, tail_beginning(text, stop, true));
  }
  text.remove_suffix(held);
  return text;
}

void LiveReply::show_reasoning(std::string_view reasoning, std::string& out) {
  if (reasoning.size() <= shown_reasoning_.size() || !reasoning.starts_with(shown_reasoning_)) return;
  out += reasoning.substr(shown_reasoning_.size());
  shown_reasoning_ = reasoning;
}

void LiveReply::show_content(std::string_view body, std::string& out) {
  if (content_trimmed_) body = trim_front(body);
  if (body.empty()) return;
  std::string_view shown = body;
  if (phase_ == Phase::kContent && rules_.choice.reads_calls()) {
    switch (rules_.tool_format) {
      case ToolCallFormat::kLlama3Json:
      case ToolCallFormat::kPythonic: {
        // The whole answer is the calls when it opens one: decided by its first character.
        const std::string_view lead = trim_front(body);
        if (lead.empty()) return;
        if (lead.front() == '{' || lead.front() == '[' || lead.front() == '<') {
          phase_ = Phase::kOff;
          return;
        }
        phase_ = Phase::kText;
        break;
      }
      case ToolCallFormat::kHermes:
      case ToolCallFormat::kQwen3Coder:
      case ToolCallFormat::kDeepSeekV3: {
        // Content before the calls loses its blanks at both ends; content without calls keeps them.
        if (blank(body.front())) {
          phase_ = Phase::kOff;
          return;
        }
        const std::string_view marker =
            rules_.tool_format == ToolCallFormat::kDeepSeekV3 ? kDeepSeekCalls : kToolCall;
        // (The content's start no longer moves once it is not blank: marker_from_ stays valid.)
        const size_t at = body.find(marker, marker_from_);
        if (at == std::string_view::npos) {
          const size_t partial = tail_beginning(body, marker, false);
          marker_from_ = body.size() - partial;
          shown = body.substr(0, body.size() - partial);
        } else {
          marker_from_ = at;
          shown = body.substr(0, at);
        }
        break;
      }
      case ToolCallFormat::kHarmony:
        return;
    }
  }
  shown = rules_.plain ? shown : trim_back(shown);
  if (shown.size() <= shown_content_.size() || !shown.starts_with(shown_content_)) return;
  out += shown.substr(shown_content_.size());
  shown_content_ = shown;
}

void LiveReply::add(std::string_view bytes, std::string& reasoning, std::string& content) {
  if (phase_ == Phase::kOff) return;
  pending_ += bytes;
  const size_t keep = unfinished_character(pending_);
  const std::string_view whole(pending_.data(), pending_.size() - keep);
  if (is_valid_utf8(whole))
    text_ += whole;
  else
    text_ += valid_utf8(whole);
  pending_.erase(0, whole.size());
  const std::string_view text = settled();
  if (rules_.plain) {
    phase_ = Phase::kText;
    show_content(text, content);
    return;
  }
  if (phase_ == Phase::kStart) {
    if (rules_.reasoning == ReasoningFormat::kNone) {
      phase_ = Phase::kContent;
    } else {
      const std::string_view lead = trim_front(text);
      if (lead.size() < kThinkOpen.size() && kThinkOpen.starts_with(lead))
        return;  // (empty too) not yet decided
      phase_ = lead.starts_with(kThinkOpen) ? Phase::kReasoning : Phase::kUnopened;
    }
  }
  if (phase_ == Phase::kReasoning || phase_ == Phase::kUnopened) {
    const size_t close = text.find(kThinkClose, close_from_);
    if (close == std::string_view::npos) {
      close_from_ = text.size() - std::min(text.size(), kThinkClose.size() - 1);
      if (phase_ == Phase::kUnopened) return;
      std::string_view inside = trim_front(trim_front(text).substr(kThinkOpen.size()));
      inside.remove_suffix(tail_beginning(inside, kThinkClose, false));
      show_reasoning(trim_back(inside), reasoning);
      return;
    }
    show_reasoning(split_reasoning(rules_.reasoning, text).reasoning, reasoning);
    phase_ = Phase::kContent;
    content_at_ = close + kThinkClose.size();
    content_trimmed_ = true;
  }
  if (phase_ == Phase::kContent || phase_ == Phase::kText) show_content(text.substr(content_at_), content);
}

}  // namespace crl::server::gateway
