#pragma once
// The `types` parameter of the synthetic environment: a task mix restricted to some task types (e.g.
// "early_fact,latest_update"), for a policy trained on another task mix (the competent frozen summarizer of
// issue 15, scenarios' `pretrain` stage). The restricted set keeps the split's order; task i of the
// environment is the i-th task of that type in the split. Shared and cached like shared_task_set.
#include <memory>
#include <string>

#include "envs/synthetic/synthetic_env.h"

namespace crl::envs::synthetic {

// `all` itself when `types` is empty; otherwise the tasks of the listed types (comma-separated names, each
// once). Throws crl::Error naming the field "types" for an unknown or repeated name, or a mix the split does
// not hold.
std::shared_ptr<const TaskSet> restrict_task_types(const std::shared_ptr<const TaskSet>& all,
                                                   const std::string& types);

}  // namespace crl::envs::synthetic
