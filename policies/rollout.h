#pragma once
// Driving episodes with a policy.
//
// drive() runs a group of episodes in lockstep: each round gathers the pending request of every live
// episode and makes ONE batched policy call (DESIGN.md rule 9), then announces the round's environment steps
// together (prepare_steps, envs/env.h: one request per remote endpoint) before submitting each decision.
// run_rollouts() shards N episodes over the Runner's threads in fixed-size groups; because every decision
// depends only on its own request (the policy contract), the trajectories are byte-identical for any thread
// count and group size.
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/runner.h"
#include "envs/episode.h"
#include "policies/policy.h"

namespace crl {

// Runs every episode (already started) to its end.
void drive(std::span<Episode* const> episodes, const Policy& policy);

struct RolloutSpec {
  std::function<std::unique_ptr<Episode>(size_t index)> make_episode;  // a new, started episode
  size_t count = 0;
  size_t group_size = 16;  // episodes per lockstep group
  // Called from the worker threads after each group with its episode count (progress reporting; must be
  // thread-safe and must not touch the episodes). May be empty.
  std::function<void(size_t done)> on_done;
};

// Returns the trajectories in index order.
std::vector<Trajectory> run_rollouts(const RolloutSpec& spec, const Policy& policy, const Runner& runner);

}  // namespace crl
