// Running scenarios: the reduced memory chain meets its gates, results do not depend on the thread count, and
// the output files have the promised structure.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/file_io.h"
#include "scenarios/report.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"
#include "tests/crl_cli.h"
#include "tests/temp_dir.h"

namespace crl::scenarios {
namespace {

RunOptions threads_and_seeds(int threads, std::vector<uint64_t> seeds = {}) {
  RunOptions options;
  options.threads = threads;
  options.seeds = std::move(seeds);
  return options;
}

std::string source(const std::string& relative) {
  return std::string(CRL_SOURCE_DIR) + "/" + relative;
}

std::string temp_dir(const std::string& name) {
  static const test::TempDir root("scenario_test");  // unique to this process, removed at exit
  const auto dir = root.path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// The shipped scenario with fewer episodes, so that the test takes seconds; the learning rates, seeds, arms
// and gates are the file's.
ScenarioSpec reduced(const std::string& file, int64_t episodes, int64_t eval) {
  ScenarioSpec spec = load_scenario(source(file));
  for (ArmSpec& arm : spec.arms) {
    auto* t = arm.setup.mutable_training();
    t->set_episodes(episodes);
    t->set_eval_episodes(eval);
    t->set_eval_interval(episodes / 2);
    t->set_curve_eval_episodes(200);
  }
  return spec;
}

TEST(ScenarioRun, ReducedMemoryChainMeetsTheGates) {
  const ScenarioSpec spec = reduced("scenarios/memory_chain.pbtxt", 1000, 1000);
  const ScenarioResult result = run_scenario(spec, threads_and_seeds(2));
  const std::vector<GateResult> gates = evaluate_gates(spec, result);
  ASSERT_EQ(gates.size(), 4u);
  for (const GateResult& g : gates) EXPECT_TRUE(g.pass) << g.name << ": " << g.detail;
  ASSERT_EQ(result.arms.size(), 2u);
  EXPECT_EQ(result.arms[0].seeds.size(), 3u);
  // The traced example went through three summaries and was rewarded.
  ASSERT_TRUE(result.arms[0].seeds[0].has_example);
  EXPECT_EQ(result.arms[0].seeds[0].example.compactions, 3);
  EXPECT_EQ(result.arms[0].seeds[0].example.reward, 1.0);
}

TEST(ScenarioRun, ToyJointBeatsFrozen) {
  const ScenarioSpec spec = reduced("scenarios/toy.pbtxt", 600, 1000);
  const ScenarioResult result = run_scenario(spec, threads_and_seeds(1));
  for (const GateResult& g : evaluate_gates(spec, result)) EXPECT_TRUE(g.pass) << g.name << ": " << g.detail;
}

TEST(ScenarioRun, FrozenControlOnlyLearnsTheAnswerAndGatesCanFail) {
  // With no training at all both arms sit at chance, so the joint gates must FAIL: the gates are not vacuous.
  ScenarioSpec spec = reduced("scenarios/memory_chain.pbtxt", 2, 500);
  for (ArmSpec& arm : spec.arms) arm.setup.mutable_training()->set_eval_interval(1);
  const ScenarioResult result = run_scenario(spec, threads_and_seeds(1, {7}));
  const std::vector<GateResult> gates = evaluate_gates(spec, result);
  EXPECT_FALSE(all_pass(gates));
  EXPECT_NE(format_report(spec, result, "crl run x").find("FAIL"), std::string::npos);
}

TEST(ScenarioRun, AblationSwitchesChangeOnlyThePaperLambdaArm) {
  // With one sampled token per segment, lambda acts only through the correction factor: three arms compute
  // the same advantages and must give identical curves; the paper's lambda gives sum_0 the factor 1/27.
  const ScenarioSpec spec = reduced("scenarios/memory_chain_ablation.pbtxt", 400, 300);
  const ScenarioResult result = run_scenario(spec, threads_and_seeds(2, {29}));
  ASSERT_EQ(result.arms.size(), 4u);
  auto accuracies = [](const ArmResult& arm) {
    std::vector<double> out;
    for (const CurvePoint& p : arm.seeds.at(0).curve) out.push_back(p.eval_accuracy);
    return out;
  };
  EXPECT_EQ(accuracies(result.arms[0]), accuracies(result.arms[1]));
  EXPECT_EQ(accuracies(result.arms[0]), accuracies(result.arms[3]));
  EXPECT_NE(accuracies(result.arms[0]), accuracies(result.arms[2]));
  const SeedResult& paper = result.arms[2].seeds.at(0);
  ASSERT_TRUE(paper.has_example);
  ASSERT_EQ(paper.example_factors.size(), 4u);
  EXPECT_NEAR(paper.example_factors[0], 1.0 / 27, 1e-12);
  EXPECT_NEAR(paper.example_factors[2], 1.0 / 3, 1e-12);
  EXPECT_EQ(result.arms[0].seeds.at(0).example_factors, (std::vector<double>{1, 1, 1, 1}));
}

const char* kTiny = R"(name: "tiny"
seeds: [7, 17]
base {
  env { name: "memory_chain" params { key: "length" value: "30" } params { key: "reset_points" value: "10,20" } }
  training { episodes: 160 batch_size: 16 eval_episodes: 100 eval_interval: 80 curve_eval_episodes: 50 }
}
arm { name: "joint" }
arm { name: "frozen" set { policy { params { key: "frozen_summary" value: "true" } } } }
gates { min_mean: 0.5 min_gap: 0.0 chance_band: 0.5 }
)";

using test::CliResult;
using test::crl;

TEST(ScenarioRun, OneAndTwoThreadsGiveByteIdenticalOutputs) {
  const std::string dir = temp_dir("threads");
  const std::string file = dir + "/tiny.pbtxt";
  write_file_atomic(file, kTiny);
  const CliResult one = crl({"run", file, "--out", dir + "/one", "--threads", "1"});
  ASSERT_EQ(one.code, 0) << one.err;
  const CliResult two = crl({"run", file, "--out", dir + "/two", "--threads", "2"});
  ASSERT_EQ(two.code, 0) << two.err;
  for (const char* name : {"summary.json", "curves.csv", "curves.svg"}) {
    EXPECT_EQ(read_file(dir + "/one/" + name), read_file(dir + "/two/" + name)) << name;
  }
  // Not a terminal: no progress line, a short result on stdout.
  EXPECT_EQ(one.err, "");
  EXPECT_NE(one.out.find("joint: mean accuracy"), std::string::npos) << one.out;
  EXPECT_EQ(crl({"run", file, "--out", dir + "/x", "--seeds", "x"}).code, 1);
  // --seeds replaces the file's seeds.
  const CliResult seeds = crl({"run", file, "--out", dir + "/seeds", "--seeds", "17"});
  ASSERT_EQ(seeds.code, 0) << seeds.err;
  const auto summary = nlohmann::json::parse(read_file(dir + "/seeds/summary.json"));
  ASSERT_EQ(summary["arms"][0]["seeds"].size(), 1u);
  EXPECT_EQ(summary["arms"][0]["seeds"][0]["seed"], 17);
  // Seed 17 alone gives the same numbers as seed 17 within the two-seed run.
  const auto both = nlohmann::json::parse(read_file(dir + "/one/summary.json"));
  EXPECT_EQ(both["arms"][0]["seeds"][1]["accuracy"], summary["arms"][0]["seeds"][0]["accuracy"]);
}

TEST(ScenarioRun, OutputFilesHaveTheirStructure) {
  const std::string dir = temp_dir("outputs");
  const std::string file = dir + "/tiny.pbtxt";
  write_file_atomic(file, kTiny);
  const CliResult r = crl({"run", file, "--out", dir + "/out"});
  ASSERT_EQ(r.code, 0) << r.err;

  const auto summary = nlohmann::json::parse(read_file(dir + "/out/summary.json"));
  EXPECT_EQ(summary["scenario"], "tiny");
  ASSERT_EQ(summary["arms"].size(), 2u);
  for (const auto& arm : summary["arms"]) {
    ASSERT_TRUE(arm["name"].is_string());
    const double mean = arm["mean_accuracy"];
    EXPECT_GE(mean, 0.0);
    EXPECT_LE(mean, 1.0);
    ASSERT_EQ(arm["seeds"].size(), 2u);
    double total = 0;
    for (const auto& seed : arm["seeds"]) {
      EXPECT_TRUE(seed["seed"].is_number_unsigned());
      EXPECT_EQ(seed["episodes"], 160);
      const double accuracy = seed["accuracy"];
      EXPECT_GE(accuracy, 0.0);
      EXPECT_LE(accuracy, 1.0);
      total += accuracy;
    }
    EXPECT_NEAR(mean, total / 2, 1e-12);
  }

  const std::string csv = read_file(dir + "/out/curves.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "arm,seed,episode,train_reward,eval_accuracy,eval_episodes,ppo_updates,mean_abs_ratio,"
            "max_ratio,clip_fraction,approx_kl,entropy,summaries_per_episode,summary_length,summary_recall,"
            "summary_invention,summary_repetition");
  // The memory chain has no typed tasks: its summary columns are empty, and no summaries.svg is written.
  EXPECT_NE(csv.find(",,,,,\n"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "/out/summaries.svg"));
  // 2 arms x 2 seeds x points at 0, 80, 160.
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 * 2 * 3);
  EXPECT_NE(csv.find("\njoint,17,160,"), std::string::npos);

  const std::string svg = read_file(dir + "/out/curves.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  for (const char* part : {"id=\"legend\"", ">joint (", ">frozen (", "training episodes", "held-out accuracy",
                           "<polygon", "<polyline"}) {
    EXPECT_NE(svg.find(part), std::string::npos) << part;
  }

  const std::string report = read_file(dir + "/out/report.md");
  for (const char* part : {"# Scenario `tiny`", "| joint |", "| frozen |", "## Gates", "PASS", "seed 17",
                           "summary 0 \"", "copied_summary", "crl run "}) {
    EXPECT_NE(report.find(part), std::string::npos) << part;
  }
}

TEST(ScenarioRun, CliErrorsNameTheFile) {
  const std::string dir = temp_dir("errors");
  const std::string file = dir + "/bad.pbtxt";
  write_file_atomic(file, "name: \"bad\"\nseeds: [1]\nbase { env { name: \"nope\" } }\n");
  const CliResult r = crl({"run", file, "--out", dir + "/out"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(file + ":3:14"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out"));
}

}  // namespace
}  // namespace crl::scenarios
