#pragma once
// Tokens and where each one came from. Every token the engine shows a policy or exports for training carries
// a provenance, because the provenance decides what is trainable: only kSampled tokens ever get actor loss.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace crl {

using TokenId = int32_t;

enum class Provenance : uint8_t {
  kPrompt = 0,         // system / user / chat-template / instruction tokens
  kEnvironment = 1,    // observations returned by the environment
  kSampled = 2,        // sampled by the policy in this call: the only trainable kind
  kCopiedSummary = 3,  // a summary copied into the resume message (trained once, when it was sampled)
  kCopiedTail = 4,     // recent atomic steps copied into a rebuilt context (never trainable again)
  kForced = 5,         // an action the environment forces (e.g. the memory chain's `continue`): not sampled
};
std::string_view provenance_name(Provenance provenance);
inline bool is_trainable(Provenance provenance) {
  return provenance == Provenance::kSampled;
}

// A run of tokens in a TokenArena, with the provenance those tokens have in the place the span is used.
struct Span {
  uint32_t begin = 0;
  uint32_t end = 0;
  Provenance provenance = Provenance::kPrompt;
  uint32_t size() const { return end - begin; }
};

// Append-only token storage for one episode. A context is a list of spans into it; rebuilding a context
// after a summary writes only the resume message and re-uses the spans of the kept steps, so no step's
// tokens are ever copied again (DESIGN.md rule 6).
class TokenArena {
 public:
  Span append(std::span<const TokenId> tokens, Provenance provenance);
  std::span<const TokenId> view(const Span& span) const {
    return {tokens_.data() + span.begin, tokens_.data() + span.end};
  }
  size_t size() const { return tokens_.size(); }
  void reserve(size_t tokens) { tokens_.reserve(tokens); }
  void clear() { tokens_.clear(); }
  // Forgets every token from `size` on (keeps the capacity): a context reused for a new episode keeps only
  // its template tokens.
  void truncate(size_t size) { tokens_.resize(std::min(size, tokens_.size())); }

 private:
  std::vector<TokenId> tokens_;
};

}  // namespace crl
