#include "cli/episode_options.h"

#include "engine/error.h"

namespace crl::cli {

void EpisodeOptions::add_to(po::options_description& options) {
  options.add_options()("env", po::value(&env)->default_value(env),
                        "environment name (see 'crl inspect --envs')")(
      "param", po::value(&params)->composing(), "environment parameter KEY=VALUE (repeatable)")(
      "view", po::value(&view)->default_value(view), "observation view: text | symbolic")(
      "seed", po::value(&seed)->default_value(seed), "run seed")(
      "capacity", po::value(&budget.capacity)->default_value(budget.capacity),
      "context capacity C in tokens")("reserve", po::value(&budget.reserve)->default_value(budget.reserve),
                                      "compaction reserve T_comp")(
      "tail-k", po::value(&budget.tail_k)->default_value(budget.tail_k), "atomic steps kept after a summary")(
      "per-turn-cap", po::value(&budget.per_turn_cap)->default_value(budget.per_turn_cap),
      "most tokens per execution turn")("summary-cap",
                                        po::value(&budget.summary_cap)->default_value(budget.summary_cap),
                                        "most tokens per summary")(
      "max-compactions", po::value(&budget.max_compactions)->default_value(budget.max_compactions),
      "compactions before the episode ends as truncated");
}

std::map<std::string, std::string> EpisodeOptions::param_map() const {
  std::map<std::string, std::string> out;
  for (const std::string& pair : params) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error("option --param", "", "value " + quote(pair) + " is not KEY=VALUE");
    }
    out[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return out;
}

}  // namespace crl::cli
