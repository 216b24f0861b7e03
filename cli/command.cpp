#include "cli/command.h"

#include <algorithm>
#include <exception>
#include <iostream>
#include <new>

#include "engine/error.h"

namespace crl::cli {

CommandRegistry& CommandRegistry::global() {
  static CommandRegistry registry;
  return registry;
}

void CommandRegistry::add(Command command) {
  CRL_CHECK(find(command.name) == nullptr, "command registered twice: " << command.name);
  commands_.push_back(std::move(command));
}

const Command* CommandRegistry::find(const std::string& name) const {
  for (const Command& c : commands_) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::vector<const Command*> CommandRegistry::all() const {
  std::vector<const Command*> out;
  for (const Command& c : commands_) out.push_back(&c);
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->name < b->name; });
  return out;
}

namespace {
void print_usage(std::ostream& out) {
  out << "usage: crl [--version] [--help] COMMAND [ARGS]\n\n"
         "crl: reinforcement learning of long-horizon agents with context compaction (CompactionRL).\n\n"
         "Commands:\n";
  for (const Command* c : CommandRegistry::global().all()) {
    out << "  " << c->name << std::string(c->name.size() < 12 ? 12 - c->name.size() : 1, ' ') << c->summary
        << "\n";
  }
  out << "\nRun 'crl COMMAND --help' for the options of a command.\n";
}
}  // namespace

int run_cli(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage(args.empty() ? std::cerr : std::cout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "crl " << CRL_VERSION << "\n";
    return 0;
  }
  const Command* command = CommandRegistry::global().find(args[0]);
  if (command == nullptr) {
    std::cerr << "crl: unknown command '" << args[0] << "' (see 'crl --help')\n";
    return 2;
  }
  try {
    return command->run(std::vector<std::string>(args.begin() + 1, args.end()));
  } catch (const Error& e) {
    // One line, whatever the message holds (parsers' messages may span lines).
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    while (!message.empty() && message.back() == ' ') message.pop_back();
    std::cerr << "crl " << command->name << ": error: " << message << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "crl " << command->name << ": error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    // Every input error is a crl::Error naming its file and field; anything else is a bug, reported as one
    // (one line, exit 70 as sysexits' EX_SOFTWARE) rather than std::terminate's abort.
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::cerr << "crl " << command->name << ": internal error: " << message
              << " (a bug in crl, not in the input: please report it with the command line)\n";
    return 70;
  }
}

}  // namespace crl::cli
