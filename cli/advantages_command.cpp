// `crl advantages --in batch.json --out result.json [--backend cpu|cuda]`: CompactionRL advantages and
// returns for trajectories produced elsewhere (the JSON format is documented in learners/batch_json.h).
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "engine/file_io.h"
#include "learners/batch_json.h"
#include "learners/diagnostics.h"
#include "learners/learner.h"

namespace crl::cli {
namespace {

int run_advantages(const std::vector<std::string>& args) {
  po::options_description options;
  options.add_options()                                                                        //
      ("in", po::value<std::string>()->required(), "batch file (JSON: options and rollouts)")  //
      ("out", po::value<std::string>()->required(), "result file (JSON), written atomically")  //
      ("backend", po::value<std::string>()->default_value("cpu"), "cpu | cuda");
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("advantages", "--in batch.json --out result.json [--backend cpu|cuda]", options, {},
                     args, vm, exit_code)) {
    return exit_code;
  }
  const std::string in = vm["in"].as<std::string>();
  const std::string out = vm["out"].as<std::string>();
  const learners::Backend backend =
      learners::parse_backend(vm["backend"].as<std::string>(), "--backend", "backend");
  const learners::AdvantagesRequest request = learners::parse_advantages_request(read_file(in), in);
  const learners::Learner learner(request.options, backend);
  const learners::Advantages advantages = learner.advantages(request.batch);
  const learners::Diagnostics diagnostics = learners::compute_diagnostics(request.batch, advantages);
  write_file_atomic(out, learners::format_advantages_result(request, advantages, diagnostics));
  std::cout << "crl advantages: " << request.batch.num_rollouts() << " rollouts, "
            << request.batch.num_segments() << " segments, " << request.batch.num_tokens() << " tokens -> "
            << out << "\n";
  return 0;
}

const CommandRegistrar kAdvantages(Command{"advantages", "compute CompactionRL advantages for a batch file",
                                           run_advantages});

}  // namespace
}  // namespace crl::cli
