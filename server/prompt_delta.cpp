#include "server/prompt_delta.h"

#include <algorithm>

namespace crl::server {

bool starts_with(const PromptView& view, std::span<const TokenId> first, std::span<const TokenId> second) {
  size_t matched = 0;  // tokens of first ++ second compared so far
  const size_t total = first.size() + second.size();
  for (const Span& span : view.spans()) {
    std::span<const TokenId> ids = view.tokens(span);
    while (!ids.empty() && matched < total) {
      const std::span<const TokenId> want =
          matched < first.size() ? first.subspan(matched) : second.subspan(matched - first.size());
      const size_t n = std::min(ids.size(), want.size());
      if (!std::equal(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n), want.begin())) return false;
      ids = ids.subspan(n);
      matched += n;
    }
    if (matched == total) return true;
  }
  return matched == total;
}

void copy_from(const PromptView& view, size_t from, std::vector<TokenId>& out) {
  size_t position = 0;
  for (const Span& span : view.spans()) {
    const std::span<const TokenId> ids = view.tokens(span);
    if (position + ids.size() > from) {
      const size_t skip = from > position ? from - position : 0;
      out.insert(out.end(), ids.begin() + static_cast<ptrdiff_t>(skip), ids.end());
    }
    position += ids.size();
  }
}

}  // namespace crl::server
