#pragma once
// Options shared by commands that run episodes: environment, view, budget, seed.
#include <map>
#include <string>
#include <vector>

#include "cli/options.h"
#include "engine/budget.h"
#include "envs/episode.h"

namespace crl::cli {

struct EpisodeOptions {
  std::string env = "memory_chain";
  std::vector<std::string> params;  // KEY=VALUE
  std::string view = "text";
  // The budget options as given; those left out come from the environment's default budget for the view
  // (EnvSpec::text_budget / symbolic_budget, shown by `crl inspect --envs`): see budget_for().
  Budget budget;
  uint64_t seed = 7;

  void add_to(po::options_description& options);
  // KEY=VALUE pairs as a map; throws crl::Error naming the option for a malformed pair.
  std::map<std::string, std::string> param_map() const;
  // The environment's default budget for the view with the options given on the command line over it,
  // validated (crl::Error naming the option).
  Budget budget_for(const EnvSpec& spec, const po::variables_map& vm) const;
};

// Checks the budget of a started episode against its first prompt (Episode::budget_fit). A budget whose
// first compaction cannot fit prints one error line naming the numbers and the smallest capacity that
// works, and returns 2 (the command exits with it, as for unusable options) rather than running episodes
// that all end truncated; 0 when it fits.
int check_budget_fits(const Episode& started, const std::string& command);

}  // namespace crl::cli
