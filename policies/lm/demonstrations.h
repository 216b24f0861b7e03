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

}  // namespace crl::lm
