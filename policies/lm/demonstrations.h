#pragma once
// Oracle demonstrations of the synthetic suite, rendered by the engine's own episodes: the oracle's actions
// and summaries (envs/synthetic/oracle.h) are submitted as the policy's tokens through `Episode`, so the
// trajectories hold exactly the contexts, compaction rebuilds and actor masks that a policy acting in the
// same setup is trained on. SFT (sft.h) reads them: `crl lm train` and the runner policy `lm`
// (lm_policy.h, its sft_* parameters).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/budget.h"
#include "engine/trajectory.h"
#include "envs/codec.h"

namespace crl::lm {

// Tasks [first, first + count) of the synthetic environment built with `env_params` (its split and
// namespace; the view is forced to text), in the text codec `codec`, under `budget`. Throws crl::Error
// naming `where` for an index past the split's end or parameters the environment refuses.
std::vector<Trajectory> oracle_demonstrations(const std::map<std::string, std::string>& env_params,
                                              std::shared_ptr<const Codec> codec, const Budget& budget,
                                              int first, int count, const std::string& where);

// Short demonstrations ("drills", policy parameters sft_short_capacity / sft_short_reserve, `crl lm train
// --short-capacity --short-reserve`): the same tasks rendered under a small capacity, so the oracle compacts
// every two or three records. Why: in an episode under the scenario's budget the trained tokens that need a
// value copied (a summary naming a record, the final `submit`) are a few dozen among a thousand or more, and
// a small model saw too few of them to learn to copy; a short budget gives several summaries per episode,
// each copying values from a few hundred tokens back, at a fraction of the attention cost. They are the same
// engine episodes with the oracle's summaries, so what they teach is what the policy does at any budget.
// The budget is `episode` with capacity and reserve replaced and max_compactions raised to
// kShortMaxCompactions (demonstrations must reach their answer; the limit is the RL budget's, not theirs).
// Throws crl::Error naming `where` when the result breaks the budget's guards.
inline constexpr int kShortMaxCompactions = 64;
Budget short_demonstration_budget(const Budget& episode, int64_t capacity, int64_t reserve,
                                  const std::string& where);

// A capacity that passes the guards can still be too small for the system prompt, a summary request and
// the rebuild: the oracle's episode is then truncated and its segments would teach a policy to fail.
// Throws crl::Error naming `where`, the first such task and what ended it, unless every trajectory ends with
// the oracle's answer (reward 1).
void require_oracle_wins(const std::vector<Trajectory>& demonstrations, const std::string& where);

}  // namespace crl::lm
