// `crl advantages` end to end through run_cli, on files in a temporary folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/file_io.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

class AdvantagesCliTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  test::TempDir dir_;
};

TEST_F(AdvantagesCliTest, WritesAdvantagesForABatchFile) {
  write_file_atomic(path("batch.json"), R"({"gamma": 1.0, "lambda": "adaptive", "correction": true,
    "critic_target": "local", "rollouts": [{"reward": 1.0, "segments": [
      {"kind": "execution", "values": [0.5, 0.25], "actor_mask": [1, 1], "critic_mask": [1, 1]},
      {"kind": "summary", "values": [0.8], "actor_mask": [1], "critic_mask": [1]}]}]})");
  ASSERT_EQ(cli::run_cli({"advantages", "--in", path("batch.json"), "--out", path("result.json")}), 0);
  const nlohmann::json out = nlohmann::json::parse(read_file(path("result.json")));
  const auto& s0 = out["rollouts"][0]["segments"][0];
  EXPECT_NEAR(s0["advantages"][0].get<double>(), 1.0 / 6.0, 1e-15);
  EXPECT_NEAR(s0["advantages"][1].get<double>(), 0.5, 1e-15);
  EXPECT_EQ(s0["n_after"], 1);
  EXPECT_EQ(s0["returns"].size(), 2u);
  EXPECT_NEAR(out["rollouts"][0]["segments"][1]["lambda"].get<double>(), 1.0 / 3.0, 1e-15);
}

TEST_F(AdvantagesCliTest, BadFileFailsWithoutWritingOutput) {
  write_file_atomic(path("bad.json"), R"({"rollouts": [{"reward": 1.0, "segments": [
      {"kind": "execution", "values": [0.5, 0.25], "actor_mask": [1]}]}]})");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::run_cli({"advantages", "--in", path("bad.json"), "--out", path("result.json")}), 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("rollouts[0].segments[0].actor_mask"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(path("result.json")));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::run_cli({"advantages", "--in", path("missing.json"), "--out", path("result.json")}), 1);
  ::testing::internal::GetCapturedStderr();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::run_cli({"advantages", "--in", path("bad.json")}), 2);  // --out is required
  ::testing::internal::GetCapturedStderr();
}

}  // namespace
}  // namespace crl
