#pragma once
// One policy call: what the episode asks (Request) and what the policy answers (Decision).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/rng.h"
#include "engine/token.h"

namespace crl {

enum class Role : uint8_t { kExecute = 0, kSummarize = 1 };
inline const char* role_name(Role role) {
  return role == Role::kExecute ? "execute" : "summarize";
}

struct Request {
  Role role = Role::kExecute;
  PromptView prompt;           // the exact context the policy must condition on
  int64_t max_new_tokens = 0;  // already clamped to what is left of the budget
  // The stream this call samples from: (run seed, task, sample, role, ordinal), where the ordinal is the
  // execution turn index or the compaction index. Policies draw only from it, so a decision does not depend
  // on batching, thread or arm (common random numbers, spec section 5).
  StreamKey stream;
  int turn = 0;         // execution turns taken so far in the episode
  int compactions = 0;  // compactions so far
};

struct Decision {
  std::vector<TokenId> tokens;         // as sampled: never decoded and re-encoded
  std::vector<float> logprobs;         // behaviour log-prob per token (empty: unknown, recorded as 0)
  std::vector<float> values;           // critic value per token (empty: none)
  bool forced = false;                 // the action is forced by the environment, not sampled (never trained)
  std::string finish_reason = "stop";  // stop | length | abort
  bool failed = false;  // the call failed (e.g. a remote server error): the episode is marked failed
  std::string error;
  // The policy weights that sampled it, when the server says (SGLang's meta_info.weight_version): recorded in
  // the export's metadata ("weight_versions") for off-policy bookkeeping; never part of the state hash.
  std::string weight_version;
};

}  // namespace crl
