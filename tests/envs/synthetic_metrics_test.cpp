// Summary metrics on hand-made cases: milestone recall, invention (future milestones, distractors, values
// never shown), repetition, superseded values and length, measured the same way in the text and symbolic
// views; and the symbolic resume context written from a summary.
#include "envs/synthetic/metrics.h"
#include "envs/synthetic/oracle.h"
#include "envs/synthetic/symbolic.h"
#include "gtest/gtest.h"

namespace crl::envs::synthetic {
namespace {

// Records 1-16 are LOG noise except the ones set here; milestones and answer derived as in a split file.
SyntheticTask hand_made(TaskType type, const std::string& target, std::vector<std::pair<int, Record>> set) {
  SyntheticTask t;
  t.task_id = "syn-test-hand-0000";
  t.type = type;
  t.target = target;
  t.records.assign(kRecordsPerTask, Record{"LOG", "status", "idle", "LOG status=idle"});
  for (auto& [position, record] : set) t.records[position - 1] = record;
  const auto problem = derive_answer(t, t.answer, t.milestones);
  EXPECT_FALSE(problem.has_value()) << *problem;
  return t;
}

// Milestones audit (record 2), deploy (6), verify (12); DRAFT patch (4), REJECTED export (8).
SyntheticTask plan_task() {
  return hand_made(TaskType::kOrderedPlan, "step",
                   {{2, {"MILESTONE", "step", "audit", ""}},
                    {4, {"DRAFT", "step", "patch", ""}},
                    {6, {"MILESTONE", "step", "deploy", ""}},
                    {8, {"REJECTED", "step", "export", ""}},
                    {12, {"MILESTONE", "step", "verify", ""}}});
}

std::vector<TokenId> keeps(std::initializer_list<int> records, bool stop = true) {
  const Vocabulary& v = Vocabulary::get();
  std::vector<TokenId> out;
  for (int r : records) out.push_back(r == 0 ? v.keep_task : v.keep(r - 1));
  if (stop) out.push_back(v.stop);
  return out;
}

TEST(synthetic_metrics, PerfectSummaryRecallsEveryObservedMilestone) {
  const SyntheticTask t = plan_task();
  EXPECT_EQ(t.answer, "{\"plan\":\"audit>deploy>verify\"}");
  const SummaryMetrics m = summary_metrics_text(t, 7, "Plan so far: audit > deploy. Next: keep reading.");
  EXPECT_EQ(m.observed_milestones, 2);
  EXPECT_EQ(m.recalled, 2);
  EXPECT_EQ(m.mentions, 2);
  EXPECT_EQ(m.invented, 0);
  EXPECT_EQ(m.repeated, 0);
  EXPECT_DOUBLE_EQ(m.recall(), 1.0);
  EXPECT_DOUBLE_EQ(m.f1(), 1.0);
  EXPECT_EQ(m.length, 9);
}

TEST(synthetic_metrics, InventionCountsFutureMilestonesDistractorsAndUnseenValues) {
  const SyntheticTask t = plan_task();
  // patch: an observed DRAFT; verify: a milestone not yet seen (record 12); restore: never shown;
  // audit_records names audit again (a repetition, as in the repro's invented audit_records array).
  const SummaryMetrics m = summary_metrics_text(t, 7, "AUDIT then patch, verify, restore; audit_records");
  EXPECT_EQ(m.observed_milestones, 2);
  EXPECT_EQ(m.recalled, 1);
  EXPECT_EQ(m.mentions, 5);
  EXPECT_EQ(m.invented, 3);
  EXPECT_EQ(m.repeated, 1);
  EXPECT_DOUBLE_EQ(m.recall(), 0.5);
  EXPECT_DOUBLE_EQ(m.invention_rate(), 0.6);
  EXPECT_DOUBLE_EQ(m.precision(), 0.2);
  EXPECT_EQ(m.length, 6);
}

TEST(synthetic_metrics, EmptySummary) {
  const SummaryMetrics m = summary_metrics_text(plan_task(), 7, "");
  EXPECT_EQ(m.length, 0);
  EXPECT_EQ(m.mentions, 0);
  EXPECT_DOUBLE_EQ(m.recall(), 0.0);
  EXPECT_DOUBLE_EQ(m.f1(), 0.0);
  const SummaryMetrics before = summary_metrics_text(plan_task(), 1, "");
  EXPECT_EQ(before.observed_milestones, 0);
  EXPECT_DOUBLE_EQ(before.recall(), 1.0) << "nothing to keep yet";
}

TEST(synthetic_metrics, SymbolicViewIsMeasuredTheSameWay) {
  const SyntheticTask t = plan_task();
  // keep:2 (audit) twice, keep:4 (DRAFT patch), keep:12 (verify, not yet seen); after STOP nothing counts.
  std::vector<TokenId> summary = keeps({0, 2, 2, 4, 12});
  summary.push_back(Vocabulary::get().keep(5));
  const SummaryMetrics s = summary_metrics_symbols(t, 7, summary);
  const SummaryMetrics x = summary_metrics_text(t, 7, "task audit audit patch verify");
  for (const SummaryMetrics* m : {&s, &x}) {
    EXPECT_EQ(m->observed_milestones, 2);
    EXPECT_EQ(m->recalled, 1);
    EXPECT_EQ(m->repeated, 1);
    EXPECT_EQ(m->invented, 2);
    EXPECT_EQ(m->mentions, 4);
  }
  EXPECT_EQ(s.length, 6) << "symbols up to and including STOP";
  const SummaryMetrics perfect = summary_metrics_symbols(t, 16, keeps({0, 2, 6, 12}));
  EXPECT_EQ(perfect.recalled, 3);
  EXPECT_DOUBLE_EQ(perfect.f1(), 1.0);
  const Vocabulary& v = Vocabulary::get();
  const SummaryMetrics values =
      summary_metrics_symbols(t, 7, std::vector<TokenId>{*v.value("deploy"), v.stop});
  EXPECT_EQ(values.recalled, 1) << "a val: token in a summary counts like a kept record";
}

TEST(synthetic_metrics, LatestUpdateKeepsOnlyTheNewestValue) {
  const SyntheticTask t = hand_made(TaskType::kLatestUpdate, "region",
                                    {{1, {"UPDATE", "region", "amber", ""}},
                                     {4, {"UPDATE", "region", "birch", ""}},
                                     {6, {"UPDATE", "owner", "delta", ""}},
                                     {10, {"UPDATE", "region", "cedar", ""}}});
  EXPECT_EQ(t.answer, "cedar");
  EXPECT_EQ(observed_milestones(t, 6), std::vector<int>{3});
  const SummaryMetrics m = summary_metrics_text(t, 6, "region was amber, now birch; owner delta");
  EXPECT_EQ(m.observed_milestones, 1);
  EXPECT_EQ(m.recalled, 1);
  EXPECT_EQ(m.superseded, 1) << "amber: an older value of the tracked key";
  EXPECT_EQ(m.invented, 1) << "delta: another key's value";
  EXPECT_DOUBLE_EQ(m.precision(), 0.5);
  const SummaryMetrics s = summary_metrics_symbols(t, 6, keeps({1, 4, 6}));
  EXPECT_EQ(s.recalled, 1);
  EXPECT_EQ(s.superseded, 1);
  EXPECT_EQ(s.invented, 1);
}

TEST(synthetic_metrics, EarlyFactCountsAnyOtherFourDigitNumberAsInvention) {
  const SyntheticTask t = hand_made(TaskType::kEarlyFact, "code",
                                    {{1, {"FACT", "code", "9815", ""}}, {3, {"NOTE", "door", "9572", ""}}});
  const SummaryMetrics m = summary_metrics_text(t, 5, "FACT code=9815 (door 9572, maybe 1234). Read 5/16.");
  EXPECT_EQ(m.recalled, 1);
  EXPECT_EQ(m.invented, 2);
  EXPECT_EQ(m.mentions, 3) << "5 and 16 are not 4-digit codes";
}

TEST(synthetic_metrics, OracleSummariesArePerfectInBothViews) {
  for (TaskType type : kTaskTypes) {
    const SyntheticTask t = generate_task("default", type, 90, "dev");
    const Oracle oracle(t, false);
    for (int seen = 0; seen <= kRecordsPerTask; ++seen) {
      for (const SummaryMetrics& m : {summary_metrics_text(t, seen, oracle.summary_text(seen)),
                                      summary_metrics_symbols(t, seen, oracle.summary_symbols(seen))}) {
        EXPECT_DOUBLE_EQ(m.recall(), 1.0) << t.task_id << " seen " << seen;
        EXPECT_EQ(m.invented, 0) << t.task_id << " seen " << seen << ": " << oracle.summary_text(seen);
        EXPECT_EQ(m.repeated, 0);
      }
    }
  }
}

TEST(synthetic_symbolic, ResumeIsWrittenFromKeptRecordsWithoutLeakingTheFuture) {
  const SyntheticTask t = plan_task();
  const Vocabulary& v = Vocabulary::get();
  const std::vector<TokenId> resume = symbolic_resume(t, 7, keeps({0, 2, 12}));
  const std::vector<TokenId> expected = {v.type(TaskType::kOrderedPlan),
                                         v.id("key:step"),
                                         v.rec(1),
                                         v.id("kind:MILESTONE"),
                                         v.id("key:step"),
                                         *v.value("audit"),
                                         v.rec(11),
                                         v.unseen};
  EXPECT_EQ(resume, expected);
  EXPECT_TRUE(symbolic_resume(t, 7, keeps({})).empty());
}

TEST(synthetic_metrics, TableSumsPerType) {
  MetricsTable table;
  EpisodeMetrics a;
  a.type = TaskType::kOrderedPlan;
  a.exact_match = true;
  a.compactions = 2;
  a.summaries = {summary_metrics_text(plan_task(), 7, "audit deploy"),
                 summary_metrics_text(plan_task(), 13, "x")};
  EpisodeMetrics b;
  b.type = TaskType::kEarlyFact;
  b.truncated = true;
  b.invalid_commands = 8;
  table.add(a);
  table.add(b);
  EXPECT_EQ(table.totals(TaskType::kOrderedPlan).exact, 1);
  EXPECT_EQ(table.totals(TaskType::kOrderedPlan).summaries, 2);
  EXPECT_DOUBLE_EQ(table.totals(TaskType::kOrderedPlan).recall_sum, 1.0);
  EXPECT_EQ(table.all().episodes, 2);
  EXPECT_EQ(table.all().invalid_commands, 8);
  const std::string report = table.report();
  EXPECT_NE(report.find("ordered_plan   exact 1/1"), std::string::npos) << report;
  EXPECT_NE(report.find("early_fact     exact 0/1  truncated 1  invalid 8"), std::string::npos) << report;
}

}  // namespace
}  // namespace crl::envs::synthetic
