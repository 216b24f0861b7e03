#pragma once
// The exact verifier of the synthetic suite (spec section 4): R = 1 for an exact answer, 0 otherwise.
#include <string_view>

#include "envs/synthetic/task.h"

namespace crl::envs::synthetic {

// Leading and trailing ASCII whitespace removed.
std::string_view trim(std::string_view text);

// Whether `submitted` answers `task` exactly. Surrounding whitespace is ignored. early_fact and latest_update
// compare the string exactly (case included). ordered_plan parses the answer as JSON: it must be an object
// with the single key "plan" whose string equals "w1>w2>w3" exactly (JSON spacing is free, an extra or a
// different key, a non-string value or a repeated key is wrong).
bool verify_answer(const SyntheticTask& task, std::string_view submitted);

}  // namespace crl::envs::synthetic
