// The compaction-cost study (scenarios/compaction_cost.h): the same file and seed give the same report bytes
// (for any thread count), the summarizers behave as modeled, and a bad file is rejected with an error that
// names the field.
#include "scenarios/compaction_cost.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "cli/command.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "tests/temp_dir.h"

namespace crl::scenarios {
namespace {

// Small enough for a unit test: 6 coding_repo tasks, batches of 6, 2 training steps.
const char* kSmall = R"pb(
  name: "small"
  description: "a unit-test study"
  seed: 3
  tasks: 6
  budget { capacity: 4096 reserve: 1024 tail_k: 2 per_turn_cap: 128 summary_cap: 768 max_compactions: 6 }
  schedule { batch_size: 6 train_steps: 2 concurrency: 6 env_step_s: 0.1 }
  summarizer { name: "oracle" kind: ORACLE }
  summarizer { name: "forgetful" kind: FROZEN keep_rate: 0.0 }
  summarizer { name: "learned" kind: LEARNED keep_rate: 0.9 }
  summarizer { name: "none" kind: NONE capacity: 65536 }
  sweep {
    field: CONCURRENCY
    values: [ 2 ]
    summarizers: "oracle"
  }
  sweep {
    field: SCHEDULER
    modes: [ ASYNC ]
    summarizers: "oracle"
  }
  sweep {
    field: KV_BUDGET
    values: [ 6000 ]
    summarizers: "oracle"
  }
)pb";

const StrategyResult& find(const CostResult& r, const std::string& name) {
  for (const StrategyResult& s : r.strategies) {
    if (s.strategy->name == name) return s;
  }
  throw std::runtime_error("no strategy " + name);
}

TEST(CompactionCost, SameFileAndSeedGiveTheSameReportBytesForAnyThreadCount) {
  const CostSpec spec = parse_compaction_cost(kSmall, "small.pbtxt");
  const CostResult one = run_compaction_cost(spec, CostRunOptions{1, {}});
  const CostResult again = run_compaction_cost(spec, CostRunOptions{1, {}});
  const CostResult two = run_compaction_cost(spec, CostRunOptions{2, {}});
  const std::string report = format_cost_report(spec, one, "crl simulate small.pbtxt");
  EXPECT_EQ(report, format_cost_report(spec, again, "crl simulate small.pbtxt"));
  EXPECT_EQ(report, format_cost_report(spec, two, "crl simulate small.pbtxt"));
  EXPECT_EQ(format_cost_json(one), format_cost_json(two));
  EXPECT_EQ(format_cost_csv(one), format_cost_csv(two));
  EXPECT_EQ(format_cost_svg(one), format_cost_svg(two));
  // A different seed changes the frozen summarizer's draws, hence the traces.
  CostSpec other = spec;
  other.seed = 4;
  const CostResult different = run_compaction_cost(other, CostRunOptions{1, {}});
  EXPECT_NE(format_cost_json(one), format_cost_json(different));
  // Every question of the issue gets its sentence.
  for (const char* q : {"How long do summary calls block an agent?", "GPU time per training step",
                        "Token overhead of summaries", "Does a learned summarizer save wall-clock time"}) {
    EXPECT_NE(report.find(q), std::string::npos) << q;
  }
  EXPECT_NE(report.find("## Stragglers"), std::string::npos);
  EXPECT_NE(report.find("What is modeled and what is assumed"), std::string::npos);
}

TEST(CompactionCost, SummarizersBehaveAsModeled) {
  const CostSpec spec = parse_compaction_cost(kSmall, "small.pbtxt");
  ASSERT_EQ(spec.strategies.size(), 7u);
  const CostResult r = run_compaction_cost(spec);
  const StrategyResult &oracle = find(r, "oracle"), &forgetful = find(r, "forgetful"),
                       &none = find(r, "none");
  EXPECT_EQ(oracle.trained_rollouts, 12);
  EXPECT_DOUBLE_EQ(oracle.success, 1.0);  // the scripted solver solves every task through its own summaries
  EXPECT_GT(oracle.compactions, 0.0);
  EXPECT_LT(forgetful.success, oracle.success);  // summaries with no fact line lose the work
  EXPECT_GT(forgetful.turns, oracle.turns);
  EXPECT_GT(oracle.summary_token_share, 0.0);
  EXPECT_GT(oracle.reprefill_token_share, 0.0);
  EXPECT_GT(oracle.summary_seconds, 0.0);
  EXPECT_EQ(none.compactions, 0.0);
  EXPECT_EQ(none.summary_token_share, 0.0);
  EXPECT_EQ(none.reprefill_token_share, 0.0);
  EXPECT_GT(none.cache_hit_rate, oracle.cache_hit_rate);  // a rebuilt context misses the cache
  EXPECT_GT(oracle.gpu_seconds_per_trajectory, 0.0);
  // Fewer rollouts in flight: more batches' worth of waiting, a slower batch.
  EXPECT_GT(find(r, "oracle concurrency=2").batch_seconds.p50, oracle.batch_seconds.p50);
  EXPECT_LE(find(r, "oracle scheduler=async").max_staleness, 1);
  // A KV cache that holds about one rollout's context at a time: queueing, and the cache no longer hits.
  const StrategyResult& tight = find(r, "oracle kv_budget=6000");
  EXPECT_GT(tight.queue_time_share, oracle.queue_time_share);
  EXPECT_GT(tight.batch_seconds.p50, oracle.batch_seconds.p50);
  EXPECT_LT(tight.cache_hit_rate, oracle.cache_hit_rate);
  EXPECT_EQ(tight.success, oracle.success);  // same traces, only slower
}

void expect_error(const std::string& text, const std::string& field, const std::string& message_part = "") {
  try {
    parse_compaction_cost(text, "bad.pbtxt");
    FAIL() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_EQ(e.where().rfind("bad.pbtxt", 0), 0u) << e.what();
    if (!message_part.empty()) {
      EXPECT_NE(std::string(e.what()).find(message_part), std::string::npos) << e.what();
    }
  }
}

TEST(CompactionCost, BadFilesNameTheField) {
  const std::string ok = "name: \"x\" summarizer { name: \"o\" }\n";
  EXPECT_NO_THROW(parse_compaction_cost(ok, "ok.pbtxt"));
  expect_error(ok + "schedule { batch_size: 0 }", "schedule.batch_size", ">= 1");
  expect_error(ok + "budget { reserve: 5000 }", "budget.reserve");
  expect_error(ok + "server { kv_budget_tokens: 1000 }", "budget.capacity", "KV budget");
  expect_error(ok + "server { prefill_tokens_per_s: -1 }", "server.prefill_tokens_per_s");
  expect_error(ok + "env: \"no_such_env\"", "env");
  expect_error(ok + "executor: \"no_such_policy\"", "executor");
  // Issue 14 item 5: rollout i plays task i mod tasks; more tasks than the split holds aliased tasks.
  expect_error(ok + "env: \"synthetic\" tasks: 61", "tasks",
               "split \"dev\" (namespace default) holds (60 tasks)");
  expect_error(ok + "sweep { field: TAIL_K values: [-1] }", "sweep[0].values[0]");
  expect_error(ok + "sweep { field: CONCURRENCY }", "sweep[0].values");
  expect_error(ok + "sweep { field: KV_BUDGET values: [100000, 2048] }", "sweep[0].values[1]", "must fit");
  expect_error(ok + "sweep { field: RESERVE values: [900] summarizers: \"nobody\" }",
               "sweep[0].summarizers[0]");
  expect_error("name: \"x\" summarizer { name: \"f\" kind: FROZEN }", "summarizer[0]", "keep_rate");
  expect_error("name: \"x\" summarizer { name: \"f\" kind: FROZEN keep_rate: 1.5 }",
               "summarizer[0].keep_rate");
  expect_error("name: \"x\" summarizer { name: \"n\" kind: NONE capacity: 2048 }", "summarizer[0].capacity");
  expect_error(
      "name: \"x\" summarizer { name: \"l\" kind: LEARNED trained_scenario: \"scenarios/memory_chain.pbtxt\" "
      "trained_arm: \"nope\" }",
      "summarizer[0].trained_arm");
  expect_error("name: \"x\"", "summarizer");
  expect_error("summarizer { name: \"o\" }", "name");
  expect_error(ok + "batch: 3", "batch");  // an unknown field, from the text parser
  try {
    parse_compaction_cost(ok + "\nschedule {\n  concurrency: 0\n}\n", "bad.pbtxt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "bad.pbtxt:4:3");  // line and column of the value's field
  }
}

TEST(CompactionCost, TheCommittedStudyParsesAndIsToldApartFromTrainingScenarios) {
  const std::string dir = CRL_SOURCE_DIR;
  const CostSpec spec = load_compaction_cost(dir + "/scenarios/compaction_cost.pbtxt");
  EXPECT_EQ(spec.summarizers.size(), 4u);
  EXPECT_GT(spec.strategies.size(), 20u);
  EXPECT_TRUE(is_compaction_cost(read_file(dir + "/scenarios/compaction_cost.pbtxt")));
  EXPECT_FALSE(is_compaction_cost(read_file(dir + "/scenarios/memory_chain.pbtxt")));
  EXPECT_FALSE(is_compaction_cost(read_file(dir + "/scenarios/toy.pbtxt")));
  // With a mistake in it, it is still recognised, so that `crl run` reports the mistake in its own terms.
  EXPECT_TRUE(is_compaction_cost("name: \"x\"\nsummarizer { name: \"o\" kind: ORACEL }\n"));
}

TEST(CompactionCost, CrlRunAndCrlSimulateWriteTheSameReport) {
  const test::TempDir temp;
  const std::filesystem::path dir = temp.path();
  const std::string file = (dir / "small.pbtxt").string();
  write_file_atomic(file, kSmall);
  ASSERT_EQ(cli::run_cli({"simulate", file, "--out", (dir / "a").string()}), 0);
  ASSERT_EQ(cli::run_cli({"run", file, "--out", (dir / "b").string(), "--threads", "2"}), 0);
  for (const char* name : {"summary.json", "strategies.csv", "cost_vs_success.svg"}) {
    EXPECT_EQ(read_file((dir / "a" / name).string()), read_file((dir / "b" / name).string())) << name;
  }
  EXPECT_NE(read_file((dir / "a" / "report.md").string()).find("crl simulate"), std::string::npos);
}

// `crl simulate --progress always` (cli/progress.h): one count per strategy, a final line, the same bytes.
TEST(CompactionCost, SimulateProgressCountsStrategiesAndChangesNoOutput) {
  const test::TempDir temp;
  const std::filesystem::path dir = temp.path();
  const std::string file = (dir / "small.pbtxt").string();
  write_file_atomic(file, kSmall);
  const size_t strategies = load_compaction_cost(file).strategies.size();
  ASSERT_EQ(cli::run_cli({"simulate", file, "--out", (dir / "a").string(), "--progress", "never"}), 0);
  const auto read_all = [&] {
    std::string all;
    for (const char* name : {"summary.json", "strategies.csv", "cost_vs_success.svg", "report.md"}) {
      all += read_file((dir / "a" / name).string());
    }
    return all;
  };
  const std::string quiet = read_all();
  testing::internal::CaptureStderr();
  ASSERT_EQ(cli::run_cli({"simulate", file, "--out", (dir / "a").string(), "--progress", "always"}), 0);
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string n = std::to_string(strategies);
  EXPECT_NE(err.find("crl simulate small: 0/" + n + " (0%), strategy "), std::string::npos) << err;
  EXPECT_NE(err.find("crl simulate small: " + n + "/" + n + " (100%), done in "), std::string::npos) << err;
  EXPECT_EQ(read_all(), quiet);
}

}  // namespace
}  // namespace crl::scenarios
