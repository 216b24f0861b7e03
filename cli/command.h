#pragma once
// Subcommands of `crl`. Each lives in its own file cli/<name>_command.cpp and registers itself with a
// CommandRegistrar; main.cpp only dispatches. A command parses its own options with Boost.Program_options
// (helpers in cli/options.h), prints `--help`, and returns the process exit code: 0 success, 1 failure
// (bad input, with a one-line error naming the file/field/value), 2 usage error or not built yet.
#include <functional>
#include <string>
#include <vector>

namespace crl::cli {

struct Command {
  std::string name;
  std::string summary;                                           // one line for `crl --help`
  std::function<int(const std::vector<std::string>& args)> run;  // args exclude "crl" and the name
};

class CommandRegistry {
 public:
  static CommandRegistry& global();
  void add(Command command);
  const Command* find(const std::string& name) const;
  std::vector<const Command*> all() const;  // sorted by name

 private:
  std::vector<Command> commands_;
};

struct CommandRegistrar {
  explicit CommandRegistrar(Command command) { CommandRegistry::global().add(std::move(command)); }
};

// Runs `crl` with the given arguments (argv[0] excluded); used by main() and by tests.
int run_cli(const std::vector<std::string>& args);

}  // namespace crl::cli
