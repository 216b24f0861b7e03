#pragma once
// The outputs of a scenario run, each a pure function of the results (so they are byte-identical whenever the
// results are), and the pass/fail gates.
//
//   summary.json  {"scenario", "arms": [{"name", "mean_accuracy", "seeds": [{"seed", "accuracy",
//   "episodes"}]}]} curves.csv    arm,seed,episode,train_reward,eval_accuracy,eval_episodes (one row per
//   curve point) curves.svg    held-out accuracy against training episodes: per arm the mean over seeds and
//   the min-max band report.md     setup, the arms x seeds table, the gates with PASS/FAIL, notes, one traced
//   episode
#include <string>
#include <vector>

#include "scenarios/runner.h"
#include "scenarios/scenario.h"

namespace crl::scenarios {

struct GateResult {
  std::string name;  // e.g. "joint mean accuracy >= 95%"
  double value = 0.0;
  bool pass = false;
  std::string detail;  // the measured value, readable
};

std::vector<GateResult> evaluate_gates(const ScenarioSpec& spec, const ScenarioResult& result);
bool all_pass(const std::vector<GateResult>& gates);

std::string format_summary_json(const ScenarioResult& result);
std::string format_curves_csv(const ScenarioResult& result);
std::string format_curves_svg(const ScenarioResult& result);
// `command` is the command line that produced the results, shown in the report.
std::string format_report(const ScenarioSpec& spec, const ScenarioResult& result, const std::string& command);

// Writes the four files into `dir` (created if needed), each atomically.
void write_results(const std::string& dir, const ScenarioSpec& spec, const ScenarioResult& result,
                   const std::string& command);

// Helpers shared with the other report writers (scenarios/compaction_cost.cpp): a number with `digits`
// decimals ("" for NaN), text escaped for SVG/XML, and the plots' colour for series i.
std::string format_fixed(double value, int digits);
std::string xml_escape(const std::string& text);
const char* plot_color(size_t series);

}  // namespace crl::scenarios
