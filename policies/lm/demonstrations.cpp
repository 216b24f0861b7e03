#include "policies/lm/demonstrations.h"

#include "engine/error.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "envs/synthetic/oracle.h"
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
    Episode episode(std::move(env), codec, config);
    episode.start(Task{task.task_id, static_cast<uint64_t>(i), split});
    envs::synthetic::Oracle oracle(task, /*symbolic=*/false);
    while (!episode.done()) {
      Decision decision;
      decision.tokens = episode.request().role == Role::kSummarize
                            ? codec->encode_action(oracle.summary_text(synthetic.records_seen()))
                            : codec->encode_action(oracle.act().text);
      episode.submit(decision);
    }
    out.push_back(episode.finish());
  }
  return out;
}

}  // namespace crl::lm
