#pragma once
// One episode of the synthetic suite played by its oracle (oracle.h) through the engine's own Episode, so the
// trajectory holds exactly the contexts, compaction rebuilds and actor masks a policy acting in the same
// setup is trained on: the demonstrations of the scenario warm start (scenarios/warm_start.h) and of the
// language model's SFT (policies/lm/demonstrations.h).
#include <memory>

#include "engine/trajectory.h"
#include "envs/codec.h"
#include "envs/episode.h"

namespace crl::envs::synthetic {

// Builds the episode on `env` (a SyntheticEnv; crl::Error otherwise) with `codec` and `config`, starts it on
// `task` and plays it to the end: the oracle's actions, and its summaries (KEEP_TASK and the milestones read
// so far in the symbolic view, their text otherwise) cut to the request's max_new_tokens as any policy's
// would be (so under a tight summary cap the newest milestones may not fit). With the codec's reasoning block
// (envs/codec.h) the final answer follows the oracle's notes (oracle.h).
Trajectory play_oracle(std::unique_ptr<Env> env, std::shared_ptr<const Codec> codec, EpisodeConfig config,
                       const Task& task);

}  // namespace crl::envs::synthetic
