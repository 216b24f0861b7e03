// `crl eval` on checkpoints written by `crl run` (issue 16 item 3): with --sample and the defaults it
// reproduces the final evaluation that the run wrote into summary.json for that arm and seed (tabular on the
// memory chain; neural on the synthetic suite, exact match per task type included); greedy decoding, the
// trajectories and the metrics file; bad input is a one-line error naming the option or the file.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/file_io.h"
#include "proto/scenario.pb.h"
#include "scenarios/checkpoint.h"
#include "tests/temp_dir.h"

namespace crl::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Result {
  int code;
  std::string out, err;
};

Result crl(const std::vector<std::string>& args) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int code = run_cli(args);
  return Result{code, testing::internal::GetCapturedStdout(), testing::internal::GetCapturedStderr()};
}

// A unique folder from tests/temp_dir.h, with its path as a string.
struct TempDir {
  crl::test::TempDir folder;
  std::string path = folder.str();
};

// A shipped scenario with fewer episodes (the same arms, policy and evaluation split): `training` is text of
// a TrainingConfig merged over the file's base.
std::string reduced(const TempDir& dir, const std::string& file, const std::string& training) {
  proto::scenario::Scenario scenario;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      read_file(std::string(CRL_SOURCE_DIR) + "/scenarios/" + file), &scenario));
  proto::scenario::TrainingConfig fewer;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(training, &fewer));
  scenario.mutable_base()->mutable_training()->MergeFrom(fewer);
  std::string text;
  google::protobuf::TextFormat::PrintToString(scenario, &text);
  const std::string path = dir.path + "/" + file;
  write_file_atomic(path, text);
  return path;
}

const json& seed_of(const json& summary, const std::string& arm, uint64_t seed) {
  for (const json& a : summary["arms"]) {
    if (a["name"] != arm) continue;
    for (const json& s : a["seeds"]) {
      if (s["seed"] == seed) return s;
    }
  }
  throw std::runtime_error("no arm " + arm);
}

TEST(EvalCommand, ReproducesTheRunsFinalEvaluationTabular) {
  TempDir dir;
  const std::string scenario = reduced(dir, "memory_chain.pbtxt",
                                       "episodes: 320 eval_episodes: 300 eval_interval: 160 "
                                       "curve_eval_episodes: 50 checkpoint_every: 100");
  const std::string out = dir.path + "/out";
  ASSERT_EQ(crl({"run", scenario, "--out", out, "--seeds", "7,17"}).code, 0);
  const json summary = json::parse(read_file(out + "/summary.json"));
  for (const std::string arm : {"joint", "frozen"}) {
    for (uint64_t seed : {7u, 17u}) {
      const std::string ck = scenarios::checkpoint_path(out, arm, seed, 320);
      const Result r = crl({"eval", "--checkpoint", ck, "--sample", "--out", dir.path + "/m.json",
                            "--threads", "2", "--trajectories", dir.path + "/t.jsonl"});
      ASSERT_EQ(r.code, 0) << r.err;
      const json m = json::parse(read_file(dir.path + "/m.json"));
      EXPECT_EQ(m["accuracy"].get<double>(), seed_of(summary, arm, seed)["accuracy"].get<double>())
          << arm << " " << seed;
      EXPECT_EQ(m["episodes"], 300);
      EXPECT_EQ(m["trained_episodes"], 320);
      EXPECT_EQ(m["decoding"], "sample");
      EXPECT_GT(m["compactions"].get<int64_t>(), 0);
      EXPECT_NE(r.out.find("accuracy"), std::string::npos);
      EXPECT_TRUE(fs::file_size(dir.path + "/t.jsonl") > 0);
    }
  }
  // Greedy: the joint arm answers from its tables' argmax; an intermediate checkpoint evaluates too.
  const Result greedy =
      crl({"eval", "--checkpoint", scenarios::checkpoint_path(out, "joint", 7, 320), "--split", "test",
           "--episodes", "50", "--seed", "3", "--out", dir.path + "/g.json"});
  ASSERT_EQ(greedy.code, 0) << greedy.err;
  const json g = json::parse(read_file(dir.path + "/g.json"));
  EXPECT_EQ(g["decoding"], "greedy");
  EXPECT_EQ(g["episodes"], 50);
  EXPECT_EQ(g["seed"], 3);
  EXPECT_EQ(crl({"eval", "--checkpoint", scenarios::checkpoint_path(out, "joint", 7, 112)}).code, 0);

  // Bad input: one line naming the option or the file.
  Result bad = crl({"eval"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--checkpoint"), std::string::npos) << bad.err;
  bad = crl({"eval", "--checkpoint", scenarios::checkpoint_path(out, "joint", 7, 320), "--split", "dev"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("has no split parameter"), std::string::npos) << bad.err;
  bad = crl({"eval", "--checkpoint", scenarios::checkpoint_path(out, "joint", 7, 320), "--split", "train"});
  EXPECT_NE(bad.err.find("is not dev or test"), std::string::npos) << bad.err;
  const std::string cut = dir.path + "/cut.ckpt";
  const std::string bytes = read_file(scenarios::checkpoint_path(out, "joint", 7, 320));
  write_file_atomic(cut, bytes.substr(0, bytes.size() - 7));
  bad = crl({"eval", "--checkpoint", cut});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find(cut), std::string::npos) << bad.err;
  bad = crl({"eval", "--checkpoint", scenarios::checkpoint_path(out, "joint", 7, 320), "--env", "synthetic"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("tabular"), std::string::npos) << bad.err;
}

TEST(EvalCommand, ReproducesTheRunsFinalEvaluationNeuralPerType) {
  TempDir dir;
  const std::string scenario =
      reduced(dir, "synthetic_neural.pbtxt", "episodes: 64 eval_episodes: 60 eval_interval: 64");
  const std::string out = dir.path + "/out";
  ASSERT_EQ(crl({"run", scenario, "--out", out, "--seeds", "7"}).code, 0);
  const json summary = json::parse(read_file(out + "/summary.json"));
  const json& s = seed_of(summary, "joint", 7);
  const Result r = crl({"eval", "--checkpoint", scenarios::checkpoint_path(out, "joint", 7, 64), "--sample",
                        "--split", "dev", "--out", dir.path + "/m.json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json m = json::parse(read_file(dir.path + "/m.json"));
  EXPECT_EQ(m["accuracy"].get<double>(), s["accuracy"].get<double>());
  EXPECT_EQ(m["env_params"]["split"], "dev");
  for (const auto& [type, value] : s["exact_match"].items()) {
    EXPECT_EQ(m["types"][type]["exact_match"].get<double>(), value.get<double>()) << type;
  }
  EXPECT_NE(r.out.find("early_fact"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace crl::cli
