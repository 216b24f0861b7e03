// Subcommands whose capability is not built yet. They say so and exit 2, so scripts fail loudly rather than
// silently doing nothing. Each line goes away when its command gets its own file.
#include <iostream>

#include "cli/command.h"

namespace crl::cli {
namespace {

Command not_built(const std::string& name, const std::string& summary, const std::string& issue) {
  return Command{name, summary + " [not built yet]", [name, issue](const std::vector<std::string>&) {
                   std::cerr << "crl " << name << ": not built yet (tracked in issue " << issue << ")\n";
                   return 2;
                 }};
}

const CommandRegistrar kEval(not_built("eval", "evaluate a policy on a split", "4"));

}  // namespace
}  // namespace crl::cli
