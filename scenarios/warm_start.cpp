#include "scenarios/warm_start.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/rng.h"
#include "envs/registry.h"
#include "envs/synthetic/oracle_episode.h"

namespace crl::scenarios {

std::vector<Trajectory> oracle_demonstrations(const EpisodeSetup& setup, uint64_t seed, int64_t first,
                                              int64_t count, const std::string& where) {
  if (setup.env != "synthetic") {
    throw Error(
        where, "warm_start",
        "environment " + quote(setup.env) + " has no oracle to demonstrate (the synthetic suite has)");
  }
  std::vector<Trajectory> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (int64_t i = first; i < first + count; ++i) {
    EpisodeConfig config;
    config.budget = setup.budget;
    config.seed = seed;
    config.group_index = i;
    const uint64_t index = static_cast<uint64_t>(i);
    out.push_back(
        envs::synthetic::play_oracle(make_env(setup.env, setup.params), setup.codec, std::move(config),
                                     Task{"demo-" + std::to_string(index), index, "train", /*cycle=*/true}));
  }
  return out;
}

std::vector<double> warm_start(const proto::scenario::WarmStartConfig& config, EpisodeSetup setup,
                               uint64_t seed, Trainable& policy, const std::string& where) {
  std::vector<double> losses;
  if (config.episodes() <= 0) return losses;
  if (config.capacity() > 0) setup.budget.capacity = config.capacity();
  const std::vector<Trajectory> demos = oracle_demonstrations(setup, seed, 0, config.episodes(), where);
  const int64_t n = static_cast<int64_t>(demos.size());
  const int64_t batch = std::max<int64_t>(1, config.batch_size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::vector<Trajectory> minibatch;
  for (int pass = 0; pass < config.epochs(); ++pass) {
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    Rng rng(StreamKey{seed, 0, static_cast<uint32_t>(pass), StreamRole::kLearner, 23});
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(order[i], order[rng.uniform_int(static_cast<uint32_t>(i + 1))]);
    for (int64_t begin = 0; begin < n; begin += batch) {
      minibatch.clear();
      for (int64_t i = begin; i < std::min(n, begin + batch); ++i) minibatch.push_back(demos[order[i]]);
      losses.push_back(policy.imitate(minibatch, config.lr()));
    }
  }
  return losses;
}

}  // namespace crl::scenarios
