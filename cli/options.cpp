#include "cli/options.h"

namespace crl::cli {

namespace {

template <typename T>
bool is_unsigned_option(const po::value_semantic* semantic) {
  return dynamic_cast<const po::typed_value<T>*>(semantic) != nullptr;
}

// Boost's lexical_cast reads "-1" into an unsigned field as its wrap-around (--port -1 listened on 65535,
// --seed -3 ran seed 18446744073709551613): a negative value of an unsigned option is refused by name.
void refuse_negative_unsigned(const po::parsed_options& parsed, const po::options_description& all) {
  for (const po::option& o : parsed.options) {
    const po::option_description* d = all.find_nothrow(o.string_key, false);
    if (d == nullptr) continue;
    const po::value_semantic* semantic = d->semantic().get();
    if (!is_unsigned_option<unsigned short>(semantic) && !is_unsigned_option<unsigned int>(semantic) &&
        !is_unsigned_option<unsigned long>(semantic) && !is_unsigned_option<unsigned long long>(semantic)) {
      continue;
    }
    for (const std::string& token : o.value) {
      const size_t first = token.find_first_not_of(" \t");
      if (first != std::string::npos && token[first] == '-') {
        throw po::error("the argument ('" + token + "') for option '--" + o.string_key +
                        "' is invalid: expected a whole number of 0 or more");
      }
    }
  }
}

}  // namespace

bool parse_options(const std::string& command, const std::string& usage,
                   const po::options_description& options,
                   const po::positional_options_description& positional, const std::vector<std::string>& args,
                   po::variables_map& vm, int& exit_code) {
  po::options_description all("Options");
  all.add(options);
  all.add_options()("help,h", "show this help");
  try {
    const po::parsed_options parsed = po::command_line_parser(args).options(all).positional(positional).run();
    refuse_negative_unsigned(parsed, all);
    po::store(parsed, vm);
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
