#pragma once
// The summaries over training (the paper's Fig. 4): at every curve point, the summaries the policy wrote in
// that point's evaluation episodes, all task types pooled (scenarios/runner.h CurvePoint::summaries):
// summaries per episode, length, milestone recall, invention and repetition, each the mean over seeds.
//
//  * summaries.svg: summary length against training episodes, per arm the mean over seeds and its 95%
//    bootstrap band (only arms that wrote summaries);
//  * a report.md section with the same points as a table, recall, invention and repetition included.
// Both exist only when some arm's curve has summary metrics (the synthetic suite, with compaction).
#include <string>

#include "scenarios/runner.h"

namespace crl::scenarios {

// Whether any arm wrote summaries at a curve point whose summaries were measured.
bool has_summary_curves(const ScenarioResult& result);

std::string format_summaries_svg(const ScenarioResult& result);
// The report.md section ("" without summary curves).
std::string format_summaries_section(const ScenarioResult& result);

}  // namespace crl::scenarios
