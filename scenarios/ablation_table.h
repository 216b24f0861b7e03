#pragma once
// The ablation table of report.md, in the layout of the paper's Table 4, for scenarios that declare
// `table { reference_arm: ... }` (proto/scenario.proto TableConfig):
//  1. one row per arm, one column per task type and one for overall accuracy; each cell the mean over seeds
//     and its 95% percentile-bootstrap interval over seeds (scenarios/statistics.h);
//  2. every ablation arm against the reference (the full method), paired by seed and task: the mean over
//     seeds of reference - ablation, its bootstrap interval, the exact sign test's p-value and the count of
//     seeds on each side;
//  3. one sentence per ablation, generated from those numbers: whether the paper's direction (reference >
//     ablation) holds here, and whether the difference is significant at 0.05.
// Pairing by task needs both arms to evaluate the same episodes for every seed (the same environment,
// evaluation parameters and number of evaluation episodes: the episodes are keyed by seed and task, never by
// arm); a pair that does not is reported as "not paired" with the reason instead of a number.
#include <string>

#include "scenarios/runner.h"
#include "scenarios/scenario.h"

namespace crl::scenarios {

// The table's markdown section ("" when the scenario declares no table).
std::string format_ablation_table(const ScenarioSpec& spec, const ScenarioResult& result);

}  // namespace crl::scenarios
