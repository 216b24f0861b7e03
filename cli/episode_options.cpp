#include "cli/episode_options.h"

#include <iostream>

#include "engine/error.h"

namespace crl::cli {

void EpisodeOptions::add_to(po::options_description& options) {
  // Budget options have no default here: left out, they are the environment's (budget_for()).
  const char* env_default = " (default: the environment's, see 'crl inspect --envs')";
  options.add_options()("env", po::value(&env)->default_value(env),
                        "environment name (see 'crl inspect --envs')")(
      "param", po::value(&params)->composing(), "environment parameter KEY=VALUE (repeatable)")(
      "view", po::value(&view)->default_value(view), "observation view: text | symbolic")(
      "seed", po::value(&seed)->default_value(seed), "run seed")(
      "capacity", po::value(&budget.capacity),
      (std::string("context capacity C in tokens") + env_default).c_str())(
      "reserve", po::value(&budget.reserve),
      (std::string("compaction reserve T_comp") + env_default).c_str())(
      "tail-k", po::value(&budget.tail_k),
      (std::string("atomic steps kept after a summary") + env_default).c_str())(
      "per-turn-cap", po::value(&budget.per_turn_cap),
      (std::string("most tokens per execution turn") + env_default).c_str())(
      "summary-cap", po::value(&budget.summary_cap),
      (std::string("most tokens per summary") + env_default).c_str())(
      "max-compactions", po::value(&budget.max_compactions),
      (std::string("compactions before the episode ends as truncated") + env_default).c_str());
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

Budget EpisodeOptions::budget_for(const EnvSpec& spec, const po::variables_map& vm) const {
  Budget b = spec.default_budget(view);
  const auto given = [&](const char* name) { return vm.count(name) != 0 && !vm[name].defaulted(); };
  if (given("capacity")) b.capacity = budget.capacity;
  if (given("reserve")) b.reserve = budget.reserve;
  if (given("tail-k")) b.tail_k = budget.tail_k;
  if (given("per-turn-cap")) b.per_turn_cap = budget.per_turn_cap;
  if (given("summary-cap")) b.summary_cap = budget.summary_cap;
  if (given("max-compactions")) b.max_compactions = budget.max_compactions;
  b.validate("budget options (--capacity, --reserve, ...; the rest from environment " + quote(spec.name) +
             ")");
  return b;
}

int check_budget_fits(const Episode& started, const std::string& command) {
  const BudgetFit fit = started.budget_fit();
  if (fit.fits) return 0;
  std::cerr << "crl " << command << ": error: option --capacity: " << fit.detail << " (give --capacity "
            << fit.min_capacity << " or more)\n";
  return 2;
}

}  // namespace crl::cli
