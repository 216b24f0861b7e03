#pragma once
// Where the compaction-cost study's learned and frozen summarizers get their keep rates (issue 15 item 6):
// from MEASURED retention in a trained policy's own summaries, never from an accuracy. The retention of an
// arm is the mean recall of the observed milestones per summary (envs/synthetic/metrics.h: of the records a
// task needs that the policy had seen when it summarized, the share its summary kept), over every summary of
// the arm's final evaluation, all seeds and task types together (each type weighted by its number of
// summaries). That is the probability that a needed fact survives one compaction, the quantity the study's
// stub summarizer applies per fact line.
//
// Two sources: the summary.json of a `crl run` results folder (retention_results), or a training scenario
// trained now (trained_scenario). Only environments that report summary metrics (the synthetic suite in the
// symbolic view) measure retention; an arm without them, or without any summary, is an error, as is a
// missing or malformed file. Errors are crl::Error naming the file, the field and what was expected.
#include <cstdint>
#include <string>

#include "scenarios/runner.h"

namespace crl::scenarios {

struct Retention {
  double keep_rate = 0.0;  // mean milestone recall per summary
  double summaries = 0.0;  // summaries it was measured on
  int64_t seeds = 0;
};

// From a trained scenario's result; `where` names the source in errors (e.g. the scenario file).
Retention retention_of_arm(const ScenarioResult& result, const std::string& arm, const std::string& where);
// From DIR/summary.json of a `crl run` results folder.
Retention read_retention(const std::string& results_dir, const std::string& arm);

}  // namespace crl::scenarios
