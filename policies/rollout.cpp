#include "policies/rollout.h"

#include <algorithm>

namespace crl {

void drive(std::span<Episode* const> episodes, const Policy& policy) {
  std::vector<Episode*> live;
  std::vector<const Request*> requests;
  std::vector<Decision> decisions;
  std::vector<PendingStep> pending;
  while (true) {
    live.clear();
    requests.clear();
    for (Episode* episode : episodes) {
      if (!episode->done()) {
        live.push_back(episode);
        requests.push_back(&episode->request());
      }
    }
    if (live.empty()) return;
    decisions.assign(live.size(), Decision{});
    policy.act(requests, decisions);
    // The round's environment steps are announced together first, so that environments in another process
    // get them in one request (envs/env.h prepare_steps); a no-op for environments that do not batch.
    pending.clear();
    for (size_t i = 0; i < live.size(); ++i) {
      if (auto step = live[i]->pending_step(decisions[i])) pending.push_back(std::move(*step));
    }
    prepare_steps(pending);
    for (size_t i = 0; i < live.size(); ++i) live[i]->submit(decisions[i]);
  }
}

std::vector<Trajectory> run_rollouts(const RolloutSpec& spec, const Policy& policy, const Runner& runner) {
  std::vector<Trajectory> out(spec.count);
  const size_t group = std::max<size_t>(1, spec.group_size);
  const size_t groups = (spec.count + group - 1) / group;
  runner.run(groups, [&](size_t g) {
    const size_t begin = g * group, end = std::min(spec.count, begin + group);
    std::vector<std::unique_ptr<Episode>> owned;
    std::vector<Episode*> episodes;
    for (size_t i = begin; i < end; ++i) {
      owned.push_back(spec.make_episode(i));
      episodes.push_back(owned.back().get());
    }
    drive(episodes, policy);
    for (size_t i = begin; i < end; ++i) out[i] = owned[i - begin]->finish();
    if (spec.on_done) spec.on_done(end - begin);
  });
  return out;
}

}  // namespace crl
