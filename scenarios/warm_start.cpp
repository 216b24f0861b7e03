#include "scenarios/warm_start.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/rng.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "envs/synthetic/oracle.h"
#include "envs/synthetic/synthetic_env.h"

namespace crl::scenarios {

std::vector<Trajectory> oracle_demonstrations(const EpisodeSetup& setup, uint64_t seed, int64_t first,
                                              int64_t count, const std::string& where) {
  if (setup.env != "synthetic") {
    throw Error(
        where, "warm_start",
        "environment " + quote(setup.env) + " has no oracle to demonstrate (the synthetic suite has)");
  }
  const bool symbolic = setup.codec->view_name() == "symbolic";
  std::vector<Trajectory> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (int64_t i = first; i < first + count; ++i) {
    std::unique_ptr<Env> env = make_env(setup.env, setup.params);
    const auto& synthetic = dynamic_cast<const envs::synthetic::SyntheticEnv&>(*env);
    EpisodeConfig config;
    config.budget = setup.budget;
    config.seed = seed;
    config.group_index = i;
    Episode episode(std::move(env), setup.codec, std::move(config));
    const uint64_t index = static_cast<uint64_t>(i);
    episode.start(Task{"demo-" + std::to_string(index), index, "train", /*cycle=*/true});
    envs::synthetic::Oracle oracle(synthetic.task(), symbolic);
    while (!episode.done()) {
      Decision decision;
      if (episode.request().role == Role::kSummarize) {
        decision.tokens = symbolic
                              ? oracle.summary_symbols(synthetic.records_seen())
                              : setup.codec->encode_action(oracle.summary_text(synthetic.records_seen()));
      } else {
        const Action action = oracle.act();
        decision.tokens = symbolic ? action.symbols : setup.codec->encode_action(action.text);
      }
      // An oracle summary longer than the cap (KEEP_TASK, every milestone, STOP) is cut where any policy's
      // would be: the engine accepts at most max_new_tokens.
      const auto cap = static_cast<size_t>(std::max<int64_t>(0, episode.request().max_new_tokens));
      if (decision.tokens.size() > cap) decision.tokens.resize(cap);
      episode.submit(decision);
    }
    out.push_back(episode.finish());
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
