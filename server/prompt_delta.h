#pragma once
// The step answer's append_ids: what extends the prompt a client holds (previous prompt + its action ids)
// to the next prompt, computed on the episode's prompt spans in place (copying the whole prompt on every step
// would make an episode quadratic in its length).
#include <span>
#include <vector>

#include "engine/context.h"

namespace crl::server {

// True when the tokens of `view` begin with `first` followed by `second` (compared span by span, in place).
bool starts_with(const PromptView& view, std::span<const TokenId> first, std::span<const TokenId> second);
// Appends the tokens of `view` from position `from` on to `out`.
void copy_from(const PromptView& view, size_t from, std::vector<TokenId>& out);

}  // namespace crl::server
