#include "cli/options.h"

namespace crl::cli {

bool parse_options(const std::string& command, const std::string& usage,
                   const po::options_description& options,
                   const po::positional_options_description& positional, const std::vector<std::string>& args,
                   po::variables_map& vm, int& exit_code) {
  po::options_description all("Options");
  all.add(options);
  all.add_options()("help,h", "show this help");
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: crl " << command << " " << usage << "\n\n" << all << "\n";
      exit_code = 0;
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "crl " << command << ": " << e.what() << " (see 'crl " << command << " --help')\n";
    exit_code = 2;
    return false;
  }
  return true;
}

}  // namespace crl::cli
