#include "engine/budget.h"

#include "engine/error.h"

namespace crl {

void Budget::validate(const std::string& where) const {
  auto require = [&](bool ok, const char* field, int64_t value, const std::string& expected) {
    if (!ok)
      throw Error(where, field, "value " + std::to_string(value) + " is invalid: expected " + expected);
  };
  require(capacity > 0, "capacity", capacity, "a positive token count");
  require(reserve > 0 && reserve < capacity, "reserve", reserve,
          "0 < reserve < capacity (" + std::to_string(capacity) + ")");
  require(tail_k >= 0, "tail_k", tail_k, "tail_k >= 0");
  require(per_turn_cap > 0 && per_turn_cap <= reserve, "per_turn_cap", per_turn_cap,
          "0 < per_turn_cap <= reserve (" + std::to_string(reserve) + ")");
  require(summary_cap > 0 && summary_cap <= reserve, "summary_cap", summary_cap,
          "0 < summary_cap <= reserve (" + std::to_string(reserve) + ")");
  require(max_compactions >= 0, "max_compactions", max_compactions, "max_compactions >= 0");
}

}  // namespace crl
