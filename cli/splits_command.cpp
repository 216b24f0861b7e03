// `crl splits`: regenerates the synthetic task splits (JSONL + MANIFEST.sha256) or checks a folder against
// its manifest. Generation is deterministic, so regenerating the committed default namespace reproduces
// data/synthetic byte for byte (tests/envs/synthetic_splits_test.cpp proves it).
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "envs/synthetic/splits.h"

namespace crl::cli {
namespace {

namespace syn = crl::envs::synthetic;

int run_splits(const std::vector<std::string>& args) {
  po::options_description options;
  std::string name_space, out, check;
  bool quiet = false;
  options.add_options()("namespace", po::value(&name_space)->default_value("default"),
                        "task namespace: default (240/60/60), phase3 (1440/180/180) or hard (240/60/60, the "
                        "hard view's tasks)")(
      "out", po::value(&out), "output folder (default data/synthetic, or data/synthetic_<namespace>)")(
      "check", po::value(&check), "verify the files of this folder against its MANIFEST.sha256 instead")(
      "quiet,q", po::bool_switch(&quiet), "do not print the balance report");
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("splits", "[--namespace NAME] [--out DIR] | --check DIR", options, {}, args, vm,
                     exit_code)) {
    return exit_code;
  }
  if (!check.empty()) {
    if (vm.count("out")) {
      std::cerr << "crl splits: --check and --out cannot be combined (see 'crl splits --help')\n";
      return 2;
    }
    const std::vector<std::string> problems = syn::check_split_dir(check);
    for (const std::string& p : problems) std::cerr << "crl splits: " << p << "\n";
    if (!problems.empty()) {
      std::cerr << "crl splits: " << check << ": " << problems.size()
                << " file(s) differ from the manifest\n";
      return 1;
    }
    std::cout << check << ": every file matches " << syn::kManifestName << "\n";
    return 0;
  }
  syn::namespace_layout(name_space);  // an unknown namespace is an error naming the known ones
  if (out.empty()) out = syn::default_split_dir(name_space);
  std::string report;
  for (const std::string& path : syn::write_split_files(name_space, out, &report)) {
    std::cout << "wrote " << path << "\n";
  }
  if (!quiet) std::cout << report;
  return 0;
}

const CommandRegistrar kSplits(Command{"splits", "regenerate or check the synthetic task splits",
                                       run_splits});

}  // namespace
}  // namespace crl::cli
