// The statistics of the report (bootstrap intervals, sign test), the ablation table and its generated
// sentences, the ratio gate against a zero reference, and the curves' confidence bands.
#include "scenarios/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/error.h"
#include "scenarios/ablation_table.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"
#include "scenarios/statistics.h"

namespace crl::scenarios {
namespace {

// --- statistics -----------------------------------------------------------------------------------------

TEST(Statistics, SignTestMatchesHandComputedBinomialTails) {
  // n = 10, 9 positive: 2 (C(10,0) + C(10,1)) / 2^10 = 22 / 1024.
  EXPECT_DOUBLE_EQ(sign_test_p(9, 10), 22.0 / 1024.0);
  EXPECT_DOUBLE_EQ(sign_test_p(1, 10), 22.0 / 1024.0);
  // n = 10, all positive: 2 / 1024, the smallest p with 10 seeds.
  EXPECT_DOUBLE_EQ(sign_test_p(10, 10), 2.0 / 1024.0);
  // n = 7, 5 positive: 2 (1 + 7 + 21) / 128 = 58 / 128.
  EXPECT_DOUBLE_EQ(sign_test_p(5, 7), 58.0 / 128.0);
  // Balanced and tiny samples cap at 1; 3 seeds all one way give 0.25.
  EXPECT_DOUBLE_EQ(sign_test_p(5, 10), 1.0);
  EXPECT_DOUBLE_EQ(sign_test_p(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(sign_test_p(3, 3), 0.25);
  // Large n takes the log-space path: n = 2000, k = 1000 is balanced (p = 1); 900 of 2000 is far out.
  EXPECT_DOUBLE_EQ(sign_test_p(1000, 2000), 1.0);
  EXPECT_LT(sign_test_p(900, 2000), 1e-5);
}

TEST(Statistics, QuantileInterpolatesLinearlyBetweenOrderStatistics) {
  const std::vector<double> x = {1.0, 2.0, 4.0, 8.0};
  EXPECT_DOUBLE_EQ(quantile_sorted(x, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(quantile_sorted(x, 1.0), 8.0);
  EXPECT_DOUBLE_EQ(quantile_sorted(x, 0.5), 3.0);    // h = 1.5
  EXPECT_DOUBLE_EQ(quantile_sorted(x, 0.25), 1.75);  // h = 0.75
  EXPECT_TRUE(std::isnan(quantile_sorted({}, 0.5)));
}

// Expected values from an independent implementation (Python 3 standard library: SplitMix64, index =
// (draw * n) >> 64, sequential float sums, type-7 quantiles), kept in the comment so that anyone can rerun
// it:
//   def sm(s): while True: s=(s+0x9e3779b97f4a7c15)&M; z=s; z=((z^(z>>30))*0xbf58476d1ce4e5b9)&M;
//              z=((z^(z>>27))*0x94d049bb133111eb)&M; yield z^(z>>31)
//   boot(vals, B, seed): B means of n draws vals[(next(g)*n)>>64]; sort; q7(0.025), q7(0.975)
TEST(Statistics, BootstrapMatchesAnIndependentImplementation) {
  const Interval a = bootstrap_mean_ci({0.9, 0.5, 0.7, 1.0, 0.8});
  EXPECT_DOUBLE_EQ(a.mean, 0.7799999999999999);
  EXPECT_DOUBLE_EQ(a.lo, 0.62);
  EXPECT_DOUBLE_EQ(a.hi, 0.9199999999999999);
  EXPECT_EQ(a.n, 5u);
  const Interval b = bootstrap_mean_ci({0.1, -0.05, 0.2, 0.0, 0.15, 0.3, 0.05, 0.12, -0.02, 0.08}, 2000, 42);
  EXPECT_DOUBLE_EQ(b.mean, 0.093);
  EXPECT_DOUBLE_EQ(b.lo, 0.032999999999999995);
  EXPECT_DOUBLE_EQ(b.hi, 0.158);
}

TEST(Statistics, BootstrapIsDeterministicAndHandlesTinySamples) {
  const std::vector<double> v = {0.2, 0.4, 0.9, 0.1};
  const Interval x = bootstrap_mean_ci(v), y = bootstrap_mean_ci(v);
  EXPECT_EQ(x.lo, y.lo);
  EXPECT_EQ(x.hi, y.hi);
  EXPECT_LE(x.lo, x.mean);
  EXPECT_GE(x.hi, x.mean);
  const Interval one = bootstrap_mean_ci({0.5});
  EXPECT_EQ(one.lo, 0.5);
  EXPECT_EQ(one.hi, 0.5);
  EXPECT_TRUE(std::isnan(bootstrap_mean_ci({}).mean));
  const Interval same = bootstrap_mean_ci({0.3, 0.3, 0.3});
  EXPECT_DOUBLE_EQ(same.lo, 0.3);
  EXPECT_DOUBLE_EQ(same.hi, 0.3);
}

TEST(Statistics, PairedComparisonCountsSidesAndRefusesUnequalLengths) {
  const PairedComparison c = paired_comparison({0.9, 0.8, 0.7, 0.6}, {0.5, 0.8, 0.9, 0.1});
  EXPECT_EQ(c.positive, 2);
  EXPECT_EQ(c.negative, 1);
  EXPECT_EQ(c.ties, 1);
  EXPECT_DOUBLE_EQ(c.p_value, sign_test_p(2, 3));
  EXPECT_NEAR(c.difference.mean, (0.4 + 0.0 - 0.2 + 0.5) / 4, 1e-15);
  EXPECT_THROW(paired_comparison({0.1, 0.2}, {0.1}), Error);
}

// --- fixtures: a parsed scenario and hand-made results
// ------------------------------------------------------

std::string scenario_text(const std::string& extra) {
  return R"(name: "t"
base {
  env { name: "memory_chain" params { key: "length" value: "8" } params { key: "reset_points" value: "4" } }
  budget { max_compactions: 1 }
  training { episodes: 10 eval_episodes: 10 }
}
seeds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
arm { name: "full" }
arm { name: "wo_a" }
arm { name: "wo_b" }
arm { name: "other_eval" set { training { eval_episodes: 20 } } }
)" + extra;
}

ArmResult arm(const std::string& name, const std::vector<double>& accuracy,
              const std::vector<std::vector<double>>& types = {}) {
  ArmResult a;
  a.name = name;
  double total = 0.0;
  for (size_t i = 0; i < accuracy.size(); ++i) {
    SeedResult s;
    s.seed = i + 1;
    s.accuracy = accuracy[i];
    for (size_t t = 0; t < types.size(); ++t) {
      s.types.push_back(TypeResult{t == 0 ? "early_fact" : "latest_update", 10, types[t][i]});
    }
    total += accuracy[i];
    a.seeds.push_back(s);
  }
  a.mean_accuracy = total / static_cast<double>(accuracy.size());
  for (size_t t = 0; t < types.size(); ++t) {
    TypeResult m{t == 0 ? "early_fact" : "latest_update", 100, 0.0};
    for (double v : types[t]) m.exact_match += v / static_cast<double>(types[t].size());
    a.types.push_back(m);
  }
  return a;
}

ScenarioResult four_arms() {
  ScenarioResult r;
  r.name = "t";
  // full beats wo_a on every seed (p = 2/1024); wo_b is ahead of full on 6 of 10 seeds (not significant).
  r.arms.push_back(
      arm("full", {0.9, 0.92, 0.88, 0.95, 0.91, 0.9, 0.93, 0.89, 0.94, 0.9},
          {{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {0.8, 0.84, 0.76, 0.9, 0.82, 0.8, 0.86, 0.78, 0.88, 0.8}}));
  r.arms.push_back(arm("wo_a", {0.5, 0.52, 0.48, 0.55, 0.51, 0.5, 0.53, 0.49, 0.54, 0.5},
                       {{0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6},
                        {0.4, 0.44, 0.36, 0.5, 0.42, 0.4, 0.46, 0.38, 0.48, 0.4}}));
  r.arms.push_back(
      arm("wo_b", {0.91, 0.93, 0.89, 0.96, 0.92, 0.91, 0.92, 0.88, 0.93, 0.89},
          {{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {0.82, 0.86, 0.78, 0.92, 0.84, 0.82, 0.8, 0.76, 0.8, 0.78}}));
  r.arms.push_back(arm("other_eval", {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1},
                       {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2}}));
  return r;
}

std::string line_with(const std::string& text, const std::string& start) {
  const size_t at = text.find(start);
  if (at == std::string::npos) return "";
  return text.substr(at, text.find('\n', at) - at);
}

// --- the arms table ---------------------------------------------------------------------------------------

TEST(ReportArms, LearningRatesKeepTheirSignificantDigits) {
  ScenarioSpec spec = parse_scenario(scenario_text(""), "t.pbtxt");
  spec.arms[0].setup.mutable_learner()->set_actor_lr(0.0003);
  spec.arms[0].setup.mutable_learner()->set_critic_lr(0.001);
  spec.arms[1].setup.mutable_learner()->set_actor_lr(1e-5);
  const std::string report = format_report(spec, four_arms(), "crl run t");
  EXPECT_NE(line_with(report, "| full |").find("LR actor 0.0003 / critic 0.001 |"), std::string::npos)
      << line_with(report, "| full |");
  EXPECT_NE(line_with(report, "| wo_a |").find("LR actor 1e-05 /"), std::string::npos)
      << line_with(report, "| wo_a |");
}

// --- the ablation table ---------------------------------------------------------------------------------

TEST(AblationTable, OnlyWhenTheScenarioDeclaresIt) {
  const ScenarioSpec plain = parse_scenario(scenario_text(""), "t.pbtxt");
  EXPECT_FALSE(plain.has_table);
  EXPECT_EQ(format_ablation_table(plain, four_arms()), "");
  EXPECT_EQ(format_report(plain, four_arms(), "crl run t").find("Ablation table"), std::string::npos);
}

TEST(AblationTable, RowsColumnsIntervalsAndOneGeneratedSentencePerAblation) {
  const ScenarioSpec spec = parse_scenario(
      scenario_text("table { reference_arm: \"full\" ablation_arms: [\"wo_a\", \"wo_b\", \"other_eval\"] }"),
      "t.pbtxt");
  ASSERT_TRUE(spec.has_table);
  const ScenarioResult result = four_arms();
  const std::string table = format_ablation_table(spec, result);
  // Header: types then overall; every arm a row with mean [lo, hi].
  EXPECT_NE(table.find("| arm | early_fact | latest_update | overall | seeds |"), std::string::npos) << table;
  const Interval full = bootstrap_mean_ci({0.9, 0.92, 0.88, 0.95, 0.91, 0.9, 0.93, 0.89, 0.94, 0.9});
  const std::string full_row = line_with(table, "| full (reference) |");
  EXPECT_NE(full_row.find(format_fixed(100 * full.mean, 1) + " [" + format_fixed(100 * full.lo, 1) + ", " +
                          format_fixed(100 * full.hi, 1) + "]"),
            std::string::npos)
      << full_row;
  EXPECT_NE(full_row.find("100.0 [100.0, 100.0]"), std::string::npos) << full_row;

  // wo_a: full ahead on all 10 seeds: direction holds, p = 2/1024, significant.
  const std::string a = line_with(table, "- **wo_a**");
  EXPECT_NE(a.find("holds here"), std::string::npos) << a;
  EXPECT_EQ(a.find("does not hold"), std::string::npos) << a;
  EXPECT_NE(a.find("full is ahead by 40.00 points overall"), std::string::npos) << a;
  EXPECT_NE(a.find("ahead on 10, behind on 0, tied on 0 of 10 seeds"), std::string::npos) << a;
  EXPECT_NE(a.find("p = 0.002"), std::string::npos) << a;
  EXPECT_NE(a.find("significant at 0.05."), std::string::npos) << a;
  EXPECT_EQ(a.find("not significant"), std::string::npos) << a;
  // wo_b: ahead of full on 6 seeds, behind on 4: the direction does not hold, not significant.
  const std::string b = line_with(table, "- **wo_b**");
  EXPECT_NE(b.find("does not hold here: wo_b is ahead by 0.20 points"), std::string::npos) << b;
  EXPECT_NE(b.find("ahead on 4, behind on 6"), std::string::npos) << b;
  EXPECT_NE(b.find("p = " + format_fixed(sign_test_p(4, 10), 3)), std::string::npos) << b;
  EXPECT_NE(b.find("not significant at 0.05."), std::string::npos) << b;
  // other_eval evaluates other episodes: not paired, said so.
  const std::string o = line_with(table, "- **other_eval**");
  EXPECT_NE(o.find("different numbers of evaluation episodes"), std::string::npos) << o;
  EXPECT_NE(line_with(table, "| other_eval | not paired"), "") << table;
  // The paired row of wo_a: reference - ablation per column.
  const std::string row = line_with(table, "| wo_a | +40.00");
  EXPECT_NE(row, "") << table;
  // Exactly one sentence per ablation.
  size_t sentences = 0;
  for (size_t at = table.find("\n- **"); at != std::string::npos; at = table.find("\n- **", at + 1))
    ++sentences;
  EXPECT_EQ(sentences, 3u);
  // And it is in the report, byte-identical when formatted again.
  const std::string report = format_report(spec, result, "crl run t");
  EXPECT_NE(report.find(table), std::string::npos);
  EXPECT_EQ(report, format_report(spec, result, "crl run t"));
}

TEST(AblationTable, SentencesFollowTheNumbersNotTheNames) {
  // The same arms with the roles swapped: now the "ablation" is ahead, so the sentence must flip.
  const ScenarioSpec spec =
      parse_scenario(scenario_text("table { reference_arm: \"wo_a\" ablation_arms: \"full\" }"), "t.pbtxt");
  const std::string table = format_ablation_table(spec, four_arms());
  const std::string s = line_with(table, "- **full**");
  EXPECT_NE(s.find("does not hold here: full is ahead by 40.00 points"), std::string::npos) << s;
  EXPECT_NE(s.find("significant at 0.05."), std::string::npos) << s;
  EXPECT_EQ(s.find("not significant"), std::string::npos) << s;
  // Identical arms: no difference, nothing to test.
  ScenarioResult same = four_arms();
  same.arms[1] = same.arms[0];
  same.arms[1].name = "wo_a";
  const std::string t = line_with(format_ablation_table(spec, same), "- **full**");
  EXPECT_NE(t.find("score the same"), std::string::npos) << t;
  EXPECT_NE(t.find("nothing to test"), std::string::npos) << t;
}

TEST(AblationTable, EveryOtherArmWhenNoAblationIsListed) {
  const ScenarioSpec spec = parse_scenario(scenario_text("table { reference_arm: \"full\" }"), "t.pbtxt");
  const std::string table = format_ablation_table(spec, four_arms());
  EXPECT_NE(table.find("- **wo_a**"), std::string::npos);
  EXPECT_NE(table.find("- **wo_b**"), std::string::npos);
  EXPECT_NE(table.find("- **other_eval**"), std::string::npos);
  EXPECT_EQ(table.find("- **full**"), std::string::npos);
}

TEST(AblationTable, BadTablesNameTheField) {
  auto fails = [](const std::string& table, const std::string& where, const std::string& what) {
    try {
      parse_scenario(scenario_text(table), "t.pbtxt");
      ADD_FAILURE() << "accepted: " << table;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  fails("table { }", "table", "needs a reference_arm");
  fails("table { reference_arm: \"nope\" }", "table.reference_arm", "\"nope\" is not in the file");
  fails("table { reference_arm: \"full\" ablation_arms: \"x\" }", "table.ablation_arms[0]",
        "not in the file");
  fails("table { reference_arm: \"full\" ablation_arms: \"full\" }", "ablation_arms[0]", "its own ablation");
  fails("table { reference_arm: \"full\" ablation_arms: [\"wo_a\", \"wo_a\"] }", "ablation_arms[1]",
        "appears twice");
}

// --- gates ----------------------------------------------------------------------------------------------

TEST(Gates, ARatioAgainstAZeroReferenceFailsWithAMessage) {
  // Before the fix, a reference that scores 0 on a type made the ratio 1 and the gate PASS.
  const ScenarioSpec spec = parse_scenario(
      scenario_text("gates { main_arm: \"wo_a\" reference_arm: \"other_eval\" min_type_ratio: 0.9 }"),
      "t.pbtxt");
  const std::vector<GateResult> gates = evaluate_gates(spec, four_arms());
  ASSERT_EQ(gates.size(), 2u);
  // early_fact: other_eval scores 0 -> FAIL, and the detail says why.
  EXPECT_FALSE(gates[0].pass);
  EXPECT_NE(gates[0].name.find("early_fact"), std::string::npos);
  EXPECT_NE(gates[0].detail.find("scores 0"), std::string::npos) << gates[0].detail;
  // latest_update: 42.4% vs 20% -> ratio 2.12 -> PASS (a passing gate, computed from the data).
  EXPECT_TRUE(gates[1].pass) << gates[1].detail;
  EXPECT_NE(gates[1].detail.find("ratio 2.120"), std::string::npos) << gates[1].detail;
  EXPECT_FALSE(all_pass(gates));
  const std::string report = format_report(spec, four_arms(), "crl run t");
  EXPECT_NE(report.find("Overall: **FAIL**"), std::string::npos);
}

TEST(Gates, ARatioGatePassesAndFailsOnTheMeasuredRatio) {
  const ScenarioSpec spec = parse_scenario(
      scenario_text("gates { main_arm: \"wo_a\" reference_arm: \"full\" min_type_ratio: 0.55 }"), "t.pbtxt");
  const std::vector<GateResult> gates = evaluate_gates(spec, four_arms());
  ASSERT_EQ(gates.size(), 2u);
  EXPECT_TRUE(gates[0].pass) << gates[0].detail;   // 60% / 100% = 0.6 >= 0.55
  EXPECT_FALSE(gates[1].pass) << gates[1].detail;  // 42.4% / 82.4% = 0.515 < 0.55
  EXPECT_NE(gates[1].detail.find("ratio 0.515"), std::string::npos) << gates[1].detail;
}

// `crl run --arms wo_a` on a file whose gates compare wo_a with full printed "gates: FAIL" (arm "full" is not
// in the results); a gate on an arm left out of the run is skipped, while an arm of the run missing from its
// results still fails.
TEST(Gates, GatesOnArmsLeftOutOfTheRunAreSkippedNotFailed) {
  const ScenarioSpec full = parse_scenario(
      scenario_text("gates { main_arm: \"wo_a\" reference_arm: \"full\" min_type_ratio: 0.55 }"), "t.pbtxt");
  ScenarioResult only_wo_a = four_arms();
  std::erase_if(only_wo_a.arms, [](const ArmResult& a) { return a.name != "wo_a"; });
  const std::vector<GateResult> skipped = evaluate_gates(select_arms(full, {"wo_a"}, "--arms"), only_wo_a);
  ASSERT_EQ(skipped.size(), 1u);  // (a per-type gate whose arm is absent is one line)
  for (const GateResult& g : skipped) {
    EXPECT_TRUE(g.skipped) << g.name;
    EXPECT_NE(g.detail.find("\"full\" was not run"), std::string::npos) << g.detail;
  }
  EXPECT_TRUE(all_pass(skipped));
  EXPECT_EQ(gates_verdict(skipped), "not evaluated (their arms were not run)");
  const std::string report = format_report(select_arms(full, {"wo_a"}, "--arms"), only_wo_a, "crl run t");
  EXPECT_NE(report.find("| skipped |"), std::string::npos);
  // The whole file's run without "full" in its results: a failure, as before.
  const std::vector<GateResult> failed = evaluate_gates(full, only_wo_a);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_FALSE(failed[0].skipped || failed[0].pass) << failed[0].name;
  EXPECT_EQ(gates_verdict(failed), "FAIL");
  // Some skipped, some evaluated: the verdict says how many were skipped.
  std::vector<GateResult> mixed = failed;
  mixed.push_back(skipped[0]);
  EXPECT_EQ(gates_verdict(mixed), "FAIL (1 of 2 skipped: their arms were not run)");
}

// --- curves ---------------------------------------------------------------------------------------------

TEST(Curves, BandsAreBootstrapIntervalsOfTheMeanOverSeeds) {
  ScenarioResult r;
  r.name = "c";
  const std::vector<double> at_end = {0.2, 0.6, 0.9, 0.4, 0.5};
  ArmResult a = arm("x", at_end);
  for (size_t i = 0; i < a.seeds.size(); ++i) {
    a.seeds[i].curve = {CurvePoint{0, NAN, 0.0, 10}, CurvePoint{100, 0.5, at_end[i], 10}};
  }
  r.arms.push_back(a);
  const std::string svg = format_curves_svg(r);
  EXPECT_NE(svg.find("band: 95% bootstrap CI"), std::string::npos);
  const Interval ci = bootstrap_mean_ci(at_end);
  // The band's upper edge at the last point is y(hi), the lower edge y(lo).
  EXPECT_NE(svg.find("," + format_fixed(PercentPlot::y(ci.hi), 2) + " "), std::string::npos) << svg;
  EXPECT_NE(svg.find("," + format_fixed(PercentPlot::y(ci.lo), 2) + " "), std::string::npos) << svg;
  // Not the min-max band of the old plot.
  EXPECT_EQ(svg.find("," + format_fixed(PercentPlot::y(0.9), 2) + " "), std::string::npos) << svg;
}

}  // namespace
}  // namespace crl::scenarios
