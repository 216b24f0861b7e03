#include "policies/lm/demonstrations.h"

#include "engine/error.h"
#include "envs/registry.h"
#include "envs/synthetic/oracle_episode.h"
#include "envs/synthetic/synthetic_env.h"

namespace crl::lm {

std::vector<Trajectory> oracle_demonstrations(const std::map<std::string, std::string>& env_params,
                                              std::shared_ptr<const Codec> codec, const Budget& budget,
                                              int first, int count, const std::string& where) {
  std::map<std::string, std::string> params = env_params;
  params["view"] = "text";
  std::vector<Trajectory> out;
  for (int i = first; i < first + count; ++i) {
    auto env = make_env("synthetic", params, where);
    const auto& synthetic = dynamic_cast<const envs::synthetic::SyntheticEnv&>(*env);
    const auto& tasks = synthetic.tasks().tasks;
    const std::string split = params.count("split") ? params.at("split") : "dev";
    if (i < 0 || i >= static_cast<int>(tasks.size())) {
      throw Error(where, "tasks",
                  task_index_message(static_cast<uint64_t>(i), TaskList{split, tasks.size()}));
    }
    const auto& task = tasks[static_cast<size_t>(i)];
    EpisodeConfig config;
    config.budget = budget;
    config.group_index = i;
    out.push_back(envs::synthetic::play_oracle(std::move(env), codec, std::move(config),
                                               Task{task.task_id, static_cast<uint64_t>(i), split}));
  }
  return out;
}

Budget short_demonstration_budget(const Budget& episode, int64_t capacity, int64_t reserve,
                                  const std::string& where) {
  Budget b = episode;
  b.capacity = capacity;
  b.reserve = reserve;
  b.max_compactions = kShortMaxCompactions;
  b.validate(where);
  return b;
}

void require_oracle_wins(const std::vector<Trajectory>& demonstrations, const std::string& where) {
  for (const Trajectory& t : demonstrations) {
    if (t.reward == 1.0) continue;
    throw Error(where, "capacity",
                "the oracle does not finish task " + quote(t.task_id) + " under this budget (reward " +
                    std::to_string(t.reward) + " after " + std::to_string(t.compactions) + " compactions" +
                    (t.reason.empty() ? std::string() : ", " + t.reason) +
                    "): the prompt, a summary request and the rebuild need a larger capacity or reserve, and "
                    "its answer (with a reasoning block, its notes too) a per-turn cap that fits it");
  }
}

}  // namespace crl::lm
