#pragma once
// `crl simulate FILE`: the compaction-cost study (scenarios/compaction_cost.h). `crl run FILE` hands a
// compaction-cost file to the same function.
#include <string>
#include <vector>

#include "cli/progress.h"

namespace crl::cli {

// Runs the study in `path` and writes report.md, summary.json, strategies.csv and cost_vs_success.svg into
// `out_dir` (default results/<name>). `command` is the command line shown in the report. Returns the exit
// code; throws crl::Error for a bad file.
int simulate_file(const std::string& path, std::string out_dir, int threads, const std::string& command,
                  ProgressMode progress_mode);

}  // namespace crl::cli
