#pragma once
// `crl lm train`: supervised fine-tuning on the synthetic suite's oracle demonstrations (text view) rendered
// by the engine's own episodes (cli/lm_train.cpp).
#include <memory>
#include <string>
#include <vector>

#include "engine/budget.h"
#include "engine/tokenizer.h"
#include "engine/trajectory.h"
#include "envs/codec.h"

namespace crl::cli {

// Oracle episodes of tasks [first, first + count) of a synthetic split in the text view with the chatml
// template and `tokenizer`: the oracle's actions and summaries (envs/synthetic/oracle.h) are submitted as
// the policy's tokens, so the trajectories hold exactly the contexts, rebuilds and actor masks a model would
// be trained on.
// `name_space`: the synthetic namespace (default; phase3 has 1,440 training tasks of the same kinds).
// `reasoning`: the codec's reasoning block (envs/codec.h; the oracle then writes notes before its answer).
std::vector<Trajectory> oracle_trajectories(const std::string& split, int first, int count,
                                            std::shared_ptr<const Tokenizer> tokenizer, const Budget& budget,
                                            const std::string& name_space = "default",
                                            const Reasoning& reasoning = {});

}  // namespace crl::cli
