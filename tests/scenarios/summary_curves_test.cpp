// The summaries over training (the paper's Fig. 4, scenarios/summary_curves.h): every curve point carries the
// pooled summary metrics of its evaluation episodes, curves.csv and report.md show them, summaries.svg draws
// the length with bootstrap bands, and checkpoints and shard records keep them bit for bit.
#include "scenarios/summary_curves.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "checkpoint.pb.h"
#include "scenarios/report.h"
#include "scenarios/statistics.h"
#include "shard.pb.h"

namespace crl::scenarios {
namespace {

TypeResult pooled(double per_episode, double length, double recall) {
  TypeResult t;
  t.type = "all";
  t.episodes = 10;
  t.summaries_per_episode = per_episode;
  t.length = length;
  t.recall = recall;
  t.invention = 0.125;
  t.repetition = 0.25;
  return t;
}

// Two arms of three seeds: "joint" writes summaries whose length grows from 10 to 20 + seed; "full" writes
// none (a full-context control).
ScenarioResult two_arms() {
  ScenarioResult r;
  r.name = "fig4";
  for (const std::string name : {"joint", "full"}) {
    ArmResult arm;
    arm.name = name;
    for (int seed = 0; seed < 3; ++seed) {
      SeedResult s;
      s.seed = static_cast<uint64_t>(seed + 1);
      for (int64_t episode : {0, 50, 100}) {
        CurvePoint p;
        p.episode = episode;
        p.eval_episodes = 10;
        p.eval_accuracy = 0.1 * seed;
        const bool joint = name == "joint";
        p.summaries = joint ? pooled(2.0, 10.0 + (episode / 10) + (episode == 100 ? seed : 0), 0.5)
                            : pooled(0.0, 0.0, 0.0);
        s.curve.push_back(p);
      }
      arm.seeds.push_back(s);
    }
    r.arms.push_back(arm);
  }
  return r;
}

TEST(SummaryCurves, TheCsvCarriesEachPointsSummariesAndLeavesUnmeasuredPointsEmpty) {
  ScenarioResult r = two_arms();
  const std::string csv = format_curves_csv(r);
  // joint, seed 3, episode 100: 2 summaries per episode, length 10 + 10 + 2.
  EXPECT_NE(csv.find("\njoint,3,100,"), std::string::npos);
  EXPECT_NE(csv.find(",2.0000,22.0000,0.500000,0.125000,0.250000\n"), std::string::npos) << csv;
  r.arms[1].seeds[0].curve[0].summaries = TypeResult{};  // not measured
  EXPECT_NE(
      format_curves_csv(r).find("\nfull,1,0,,0.000000,10,0,0.000000,0.000000,0.000000,0.00000000,0.000000,"
                                ",,,,\n"),
      std::string::npos)
      << format_curves_csv(r);
}

TEST(SummaryCurves, TheSvgDrawsOnlyArmsThatWroteSummariesWithBootstrapBands) {
  const ScenarioResult r = two_arms();
  ASSERT_TRUE(has_summary_curves(r));
  const std::string svg = format_summaries_svg(r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("<title>joint</title>"), std::string::npos);
  EXPECT_EQ(svg.find(">full<"), std::string::npos) << "an arm without summaries is drawn";
  // The band at the last point: the bootstrap interval of {20, 21, 22} on an axis from 0 to 50.
  const Interval ci = bootstrap_mean_ci({20.0, 21.0, 22.0});
  EXPECT_NE(svg.find("," + format_fixed(PercentPlot::y(ci.hi / 50.0), 2) + " "), std::string::npos) << svg;
  EXPECT_NE(svg.find("," + format_fixed(PercentPlot::y(ci.lo / 50.0), 2) + " "), std::string::npos) << svg;
  EXPECT_NE(svg.find(">50</text>"), std::string::npos) << svg;
}

TEST(SummaryCurves, TheReportTableHasTheMeansOverSeedsAtEveryPoint) {
  const std::string section = format_summaries_section(two_arms());
  EXPECT_NE(section.find("## Summaries over training (the paper's Fig. 4)"), std::string::npos);
  // joint at 100: mean length (20 + 21 + 22) / 3, accuracy (0 + 10 + 20) / 3 %.
  EXPECT_NE(section.find("| joint | 100 | 10.00% | 2.00 | 21.00 | 50.00% | 12.50% | 25.00% |"),
            std::string::npos)
      << section;
  EXPECT_NE(section.find("| joint | 0 | 10.00% | 2.00 | 10.00 |"), std::string::npos) << section;
  EXPECT_EQ(section.find("| full |"), std::string::npos);
}

TEST(SummaryCurves, NothingIsWrittenWithoutMeasuredSummaries) {
  ScenarioResult r = two_arms();
  for (ArmResult& arm : r.arms) {
    for (SeedResult& s : arm.seeds) {
      for (CurvePoint& p : s.curve) p.summaries = TypeResult{};
    }
  }
  EXPECT_FALSE(has_summary_curves(r));
  EXPECT_EQ(format_summaries_section(r), "");
  // One seed's point unmeasured (an untyped environment's arm): that arm is not drawn.
  r = two_arms();
  r.arms[0].seeds[1].curve[2].summaries = TypeResult{};
  EXPECT_FALSE(has_summary_curves(r));
}

// A resumed run reads its curve back from the checkpoint and a merged one from the shard records: both must
// keep every field of a point, summaries included, bit for bit.
template <typename Message>
void expect_round_trip() {
  CurvePoint p;
  p.episode = 64;
  p.train_reward = 0.3125;
  p.eval_accuracy = 1.0 / 3.0;
  p.eval_episodes = 30;
  p.ppo_updates = 3;
  p.mean_abs_ratio = 0.01;
  p.max_ratio = 1.4;
  p.clip_fraction = 0.1;
  p.approx_kl = 1e-4;
  p.entropy = 2.5;
  p.summaries = pooled(2.5, 23.1, 0.08);
  p.summaries.f1 = 0.7;
  p.summaries.exact_match = 0.2;
  Message m;
  point_to_proto(p, &m);
  Message wire;
  ASSERT_TRUE(wire.ParseFromString(m.SerializeAsString()));
  const CurvePoint q = point_from_proto(wire);
  EXPECT_EQ(q.episode, p.episode);
  EXPECT_EQ(q.train_reward, p.train_reward);
  EXPECT_EQ(q.eval_accuracy, p.eval_accuracy);
  EXPECT_EQ(q.eval_episodes, p.eval_episodes);
  EXPECT_EQ(q.ppo_updates, p.ppo_updates);
  EXPECT_EQ(q.entropy, p.entropy);
  EXPECT_EQ(q.summaries.type, "all");
  EXPECT_EQ(q.summaries.episodes, 10);
  EXPECT_EQ(q.summaries.length, 23.1);
  EXPECT_EQ(q.summaries.recall, 0.08);
  EXPECT_EQ(q.summaries.f1, 0.7);
  EXPECT_EQ(q.summaries.exact_match, 0.2);
  // An unmeasured point stays unmeasured.
  p.summaries = TypeResult{};
  Message bare;
  point_to_proto(p, &bare);
  EXPECT_FALSE(bare.has_summaries());
  EXPECT_EQ(point_from_proto(bare).summaries.episodes, 0);
}

TEST(SummaryCurves, CheckpointsAndShardRecordsKeepEveryFieldOfAPoint) {
  expect_round_trip<proto::checkpoint::CurvePoint>();
  expect_round_trip<proto::shard::Point>();
}

}  // namespace
}  // namespace crl::scenarios
