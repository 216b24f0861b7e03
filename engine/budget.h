#pragma once
// The context budget of spec section 1.1. Defaults are the synthetic-suite values of spec section 4
// (C = 1024, T_comp = 256, per-turn cap 64, summary cap 256); the paper's are C = 64k, T_comp = 10,240,
// per-turn cap 10,240 (the README lists both).
#include <cstdint>
#include <string>

namespace crl {

struct Budget {
  int64_t capacity = 1024;    // C: peak context in tokens
  int64_t reserve = 256;      // T_comp: compact when C - |h| < T_comp
  int tail_k = 2;             // newest atomic steps kept after a summary (reduced 2 -> 1 -> 0 to fit)
  int64_t per_turn_cap = 64;  // most tokens one execution turn may sample (clamped to C - prompt)
  int64_t summary_cap = 256;  // most tokens one summary may sample (clamped to C - prompt)
  int max_compactions = 3;    // after this many, a triggered episode ends as truncated

  // Checks the guards of spec 1.1 (c): every size positive, max(per_turn_cap, summary_cap) <= T_comp < C.
  // Throws crl::Error naming `where` and the field.
  void validate(const std::string& where) const;
};

}  // namespace crl
