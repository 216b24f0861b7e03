#include "server/gateway/prompt_ids_text.h"

#include "engine/json_escape.h"

namespace crl::server::gateway {

namespace {
bool same_span(const Span& a, const Span& b) {
  return a.begin == b.begin && a.end == b.end;
}
}  // namespace

std::string_view PromptIdsText::text(const PromptView& prompt, uint64_t generation, int compactions) {
  const std::vector<Span>& spans = prompt.spans();
  // Which spans are already written: all of the cached ones when they open the new list (same arena life).
  size_t from = 0;
  // The arena by the address of its tokens (PromptView does not expose the arena): a reallocation only
  // costs a rewrite; a new arena at an old address is told apart by `generation`.
  const TokenId* arena = spans.empty() ? nullptr : prompt.tokens(spans[0]).data() - spans[0].begin;
  if (arena_ != nullptr && arena_ == arena && generation_ == generation && compactions_ == compactions &&
      spans_.size() <= spans.size() && std::equal(spans_.begin(), spans_.end(), spans.begin(), same_span)) {
    from = spans_.size();
    text_.pop_back();  // the closing ']'
  } else {
    text_.clear();
    // Room for this prompt and what later turns append (ids of up to 6 digits and a comma each), so the
    // text is not copied again as the window grows.
    text_.reserve(static_cast<size_t>(prompt.size()) * 8 + 4096);
    text_ += '[';
    ids_ = 0;
    spans_.clear();
  }
  last_written_ = 0;
  for (size_t s = from; s < spans.size(); ++s) {
    for (const TokenId id : prompt.tokens(spans[s])) {
      if (ids_ > 0) text_ += ',';
      append_json_int(text_, static_cast<int64_t>(id));
      ++ids_;
      ++last_written_;
    }
    spans_.push_back(spans[s]);
  }
  text_ += ']';
  arena_ = arena;
  generation_ = generation;
  compactions_ = compactions;
  return text_;
}

}  // namespace crl::server::gateway
