#include "envs/synthetic/task_mix.h"

#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "engine/error.h"

namespace crl::envs::synthetic {

std::shared_ptr<const TaskSet> restrict_task_types(const std::shared_ptr<const TaskSet>& all,
                                                   const std::string& types) {
  if (types.empty()) return all;
  const std::string where = "environment \"synthetic\"";
  std::set<TaskType> keep;
  std::stringstream list(types);
  std::string name;
  while (std::getline(list, name, ',')) {
    const auto type = parse_task_type(name);
    if (!type) {
      throw Error(where, "types",
                  "value " + quote(name) + " is not early_fact, latest_update or ordered_plan (in " +
                      quote(types) + ")");
    }
    if (!keep.insert(*type).second) throw Error(where, "types", "type " + quote(name) + " appears twice");
  }
  // Keyed by the full set's address (sets are cached for the process's life) and the list.
  static std::mutex mutex;
  static std::map<std::pair<const TaskSet*, std::string>, std::shared_ptr<const TaskSet>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(all.get(), types);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto set = std::make_shared<TaskSet>();
  for (size_t i = 0; i < all->tasks.size(); ++i) {
    if (!keep.count(all->tasks[i].type)) continue;
    set->by_id.emplace(all->tasks[i].task_id, static_cast<int>(set->tasks.size()));
    set->tasks.push_back(all->tasks[i]);
    set->views.push_back(all->views[i]);
  }
  if (set->tasks.empty()) throw Error(where, "types", "the split holds no task of type(s) " + quote(types));
  cache.emplace(key, set);
  return set;
}

}  // namespace crl::envs::synthetic
