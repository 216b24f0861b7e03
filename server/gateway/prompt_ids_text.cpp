#include "server/gateway/prompt_ids_text.h"

#include <algorithm>
#include <charconv>
#include <span>

#include "engine/json_escape.h"

namespace crl::server::gateway {

namespace {
constexpr size_t kMaxIdChars = 12;  // a comma and "-2147483648"
constexpr size_t kBlock = 256;
bool same_span(const Span& a, const Span& b) {
  return a.begin == b.begin && a.end == b.end;
}
}  // namespace

std::string_view PromptIdsText::text(const PromptView& prompt, uint64_t generation, int compactions) {
  const std::vector<Span>& spans = prompt.spans();
  // Which spans are already written: all of the cached ones when they open the new list (same arena life).
  // Spans are offsets into the arena, so a reallocation of its storage (the window's first action moves
  // it) changes nothing written; `generation` tells a new arena (or one truncated for a new episode) apart.
  size_t from = 0;
  if (cached_ && generation_ == generation && compactions_ == compactions && spans_.size() <= spans.size() &&
      std::equal(spans_.begin(), spans_.end(), spans.begin(), same_span)) {
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
  size_t written = ids_;  // (a local: the char stores below could alias a member, reloaded per id)
  for (size_t s = from; s < spans.size(); ++s) {
    // Written in place, a block of ids at a time: room for the widest id and its comma each, cut to what was
    // written (an append per id took about three times the instructions: callgrind, bench/RESULTS.md eighth
    // pass). Blocks, not the span at once: room sized for the widest ids touches twice the pages the text
    // takes.
    const std::span<const TokenId> ids = prompt.tokens(spans[s]);
    for (size_t block = 0; block < ids.size(); block += kBlock) {
      const size_t n = std::min(kBlock, ids.size() - block);
      const size_t at = text_.size();
      text_.resize(at + n * kMaxIdChars);
      char* out = text_.data() + at;
      for (const TokenId id : ids.subspan(block, n)) {
        *out = ',';  // kept by the step past it unless this is the first id
        out += written != 0;
        ++written;
        out = id >= 0 ? put_decimal(out, static_cast<uint32_t>(id))
                      : std::to_chars(out, out + kMaxIdChars, id).ptr;
      }
      text_.resize(static_cast<size_t>(out - text_.data()));
    }
    last_written_ += ids.size();
    spans_.push_back(spans[s]);
  }
  ids_ = written;
  text_ += ']';
  cached_ = true;
  generation_ = generation;
  compactions_ = compactions;
  return text_;
}

}  // namespace crl::server::gateway
