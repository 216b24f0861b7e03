// The `crl` command line: dispatches to the subcommands registered in cli/*_command.cpp.
#include <string>
#include <vector>

#include "cli/command.h"

int main(int argc, char** argv) {
  return crl::cli::run_cli(std::vector<std::string>(argv + 1, argv + argc));
}
