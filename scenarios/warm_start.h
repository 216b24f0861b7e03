#pragma once
// The warm start of a scenario job (proto WarmStartConfig): oracle demonstrations, then supervised steps of
// the policy on the demonstrator's answers, before any pretraining or RL. Why: the paper starts CompactionRL
// from a base model that can already read a context and answer; a pointer network trained from scratch on
// the hard suite's sparse terminal reward first has to discover what an answer is (its full-context control
// reached 17% after 6,000 episodes, issue 15), so what the arms compare, learning what to KEEP, never gets
// a signal. The warm start gives every arm the same competent reader and leaves the summaries to the reward.
#include <cstdint>
#include <vector>

#include "engine/trajectory.h"
#include "policies/trainable.h"
#include "proto/scenario.pb.h"
#include "scenarios/runner.h"

namespace crl::scenarios {

// The oracle's episodes "demo-<first>" .. "demo-<first + count - 1>" of `setup` (the synthetic suite, either
// view: envs/synthetic/oracle.h; its summaries name exactly the milestones read so far), in index order, one
// thread. Throws crl::Error naming `where` for any other environment.
std::vector<Trajectory> oracle_demonstrations(const EpisodeSetup& setup, uint64_t seed, int64_t first,
                                              int64_t count, const std::string& where);

// Runs the warm start `config` on `policy`: demonstrations of `setup` with the capacity config.capacity
// (0: setup.budget's), then config.epochs passes of shuffled minibatches (Fisher-Yates on the stream
// {seed, 0, pass, kLearner, 23}). Returns each minibatch's mean negative log-likelihood before its step.
std::vector<double> warm_start(const proto::scenario::WarmStartConfig& config, EpisodeSetup setup,
                               uint64_t seed, Trainable& policy, const std::string& where);

}  // namespace crl::scenarios
