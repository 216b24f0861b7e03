#include "engine/token.h"

#include "engine/error.h"

namespace crl {

std::string_view provenance_name(Provenance provenance) {
  switch (provenance) {
    case Provenance::kPrompt:
      return "prompt";
    case Provenance::kEnvironment:
      return "environment";
    case Provenance::kSampled:
      return "sampled";
    case Provenance::kCopiedSummary:
      return "copied_summary";
    case Provenance::kCopiedTail:
      return "copied_tail";
    case Provenance::kForced:
      return "forced";
  }
  return "unknown";
}

Span TokenArena::append(std::span<const TokenId> tokens, Provenance provenance) {
  CRL_CHECK(tokens_.size() + tokens.size() < (uint64_t{1} << 32), "token arena over 2^32 tokens");
  const auto begin = static_cast<uint32_t>(tokens_.size());
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  return Span{begin, static_cast<uint32_t>(tokens_.size()), provenance};
}

}  // namespace crl
