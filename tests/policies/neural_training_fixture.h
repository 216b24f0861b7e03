#pragma once
// What the neural policy's training tests share (neural_ppo_test.cpp, neural_cuda_policy_test.cpp): the
// synthetic suite's symbolic view, a batch of compacted episodes with known rewards, and PPO learner options.
#include <memory>
#include <string>
#include <vector>

#include "engine/runner.h"
#include "envs/registry.h"
#include "learners/options.h"
#include "policies/policy.h"
#include "policies/rollout.h"

namespace crl::neural::testing {

struct Fixture {
  std::unique_ptr<Env> env = make_env("synthetic", {{"view", "symbolic"}, {"split", "train"}});
  std::shared_ptr<const Codec> codec = make_codec("symbolic", env->spec());
  PolicyTarget target{&env->spec(), codec};
};

// `count` compacted episodes (C = 64) with every other one rewarded.
inline std::vector<Trajectory> rewarded(const Fixture& f, const Policy& policy, size_t count, uint64_t seed) {
  RolloutSpec spec;
  spec.count = count;
  spec.make_episode = [&](size_t i) {
    EpisodeConfig config;
    config.budget.capacity = 64;
    config.budget.reserve = 16;
    config.budget.per_turn_cap = 4;
    config.budget.summary_cap = 6;
    config.budget.max_compactions = 8;
    config.seed = seed;
    config.group_index = static_cast<int64_t>(i);
    auto e = std::make_unique<Episode>(make_env("synthetic", {{"view", "symbolic"}, {"split", "train"}}),
                                       f.codec, std::move(config));
    e->start(Task{"train-" + std::to_string(i), i, "train"});
    return e;
  };
  std::vector<Trajectory> ts = run_rollouts(spec, policy, Runner(1));
  for (size_t i = 0; i < ts.size(); ++i) ts[i].reward = i % 2 == 0 ? 1.0 : 0.0;
  return ts;
}

inline learners::LearnerOptions ppo(int epochs, int minibatches) {
  learners::LearnerOptions o;
  o.lambda_mode = learners::LambdaMode::kFixed;
  o.lambda = 1.0;
  o.ppo_epochs = epochs;
  o.minibatches = minibatches;
  return o;
}

}  // namespace crl::neural::testing
