#pragma once
// The outputs of a scenario run, each a pure function of the results (so they are byte-identical whenever the
// results are), and the pass/fail gates.
//
//  * summary.json: {"scenario", "arms": [{"name", "mean_accuracy", "seeds": [{"seed", "accuracy",
//    "episodes", ...}], "types"}]}
//  * curves.csv: arm,seed,episode,train_reward,eval_accuracy,eval_episodes (one row per curve point)
//  * summaries.svg (when measured: scenarios/summary_curves.h): summary length over training
//  * curves.svg: held-out accuracy against training episodes: per arm the mean over seeds and its 95%
//    bootstrap band (scenarios/statistics.h)
//  * report.md: setup, the arms x seeds table, per-type metrics, the ablation table when the scenario
//  declares
//    one (scenarios/ablation_table.h), the gates with PASS/FAIL, notes, one traced episode.
// The run's wall time is not in these files (it differs run to run): `crl run` writes it to runtime.txt.
#include <ostream>
#include <string>
#include <vector>

#include "scenarios/runner.h"
#include "scenarios/scenario.h"

namespace crl::scenarios {

struct GateResult {
  std::string name;  // e.g. "joint mean accuracy >= 95%"
  double value = 0.0;
  bool pass = false;
  std::string detail;    // the measured value, readable
  bool skipped = false;  // an arm it compares was left out of this run (`crl run --arms`): not evaluated
};

// A gate whose arm is in the spec but not in the results fails; one whose arm the spec no longer has (a run
// of some arms, scenarios::select_arms) is skipped, neither pass nor fail.
std::vector<GateResult> evaluate_gates(const ScenarioSpec& spec, const ScenarioResult& result);
// Every evaluated gate passes (skipped ones do not count).
bool all_pass(const std::vector<GateResult>& gates);
// The one-line verdict `crl run` and `crl merge` print after "gates: ": PASS or FAIL, with the number of
// gates skipped when some were, or "not evaluated" when all were.
std::string gates_verdict(const std::vector<GateResult>& gates);

std::string format_summary_json(const ScenarioResult& result);
std::string format_curves_csv(const ScenarioResult& result);
std::string format_curves_svg(const ScenarioResult& result);
// `command` is the command line that produced the results, shown in the report.
std::string format_report(const ScenarioSpec& spec, const ScenarioResult& result, const std::string& command);

// Writes the four files into `dir` (created if needed) as one set (scenarios/output_set.h: staged, fsync'd,
// renamed into place under an INCOMPLETE marker).
void write_results(const std::string& dir, const ScenarioSpec& spec, const ScenarioResult& result,
                   const std::string& command);

// Helpers shared with the other report writers (scenarios/compaction_cost.cpp): a number with `digits`
// decimals ("" for NaN), text escaped for SVG/XML, the plots' colour for series i, and a / b for a table's
// per-unit column (0 when b is not positive: a run with no episodes, say).
std::string format_fixed(double value, int digits);
std::string xml_escape(const std::string& text);
const char* plot_color(size_t series);
double ratio_or_zero(double a, double b);

// The frame both report plots share (learning curves, cost vs success): a 760 x 460 SVG whose y axis is a
// share in [0, 1] drawn as 0-100 %, with the legend space on the right.
struct PercentPlot {
  static constexpr double kWidth = 760, kHeight = 460, kLeft = 70, kRight = 190, kTop = 40, kBottom = 60;
  static constexpr double kPlotWidth = kWidth - kLeft - kRight, kPlotHeight = kHeight - kTop - kBottom;
  // The y coordinate of a share in [0, 1].
  static double y(double share) { return kTop + kPlotHeight * (1.0 - share); }
  // The SVG header, a white background, the title (escaped here) and the grid lines and labels at 0, 25, 50,
  // 75 and 100 %.
  static void open(std::ostream& out, const std::string& title);
  // Only the SVG header, the white background and the title (plots with their own y axis).
  static void header(std::ostream& out, const std::string& title);
  // The plot's border and the two axis labels (escaped here).
  static void frame(std::ostream& out, const std::string& x_label, const std::string& y_label);
};

}  // namespace crl::scenarios
