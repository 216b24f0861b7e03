#pragma once
// Options shared by commands that run episodes: environment, view, budget, seed.
#include <map>
#include <string>
#include <vector>

#include "cli/options.h"
#include "engine/budget.h"

namespace crl::cli {

struct EpisodeOptions {
  std::string env = "memory_chain";
  std::vector<std::string> params;  // KEY=VALUE
  std::string view = "text";
  Budget budget;
  uint64_t seed = 7;

  void add_to(po::options_description& options);
  // KEY=VALUE pairs as a map; throws crl::Error naming the option for a malformed pair.
  std::map<std::string, std::string> param_map() const;
};

}  // namespace crl::cli
