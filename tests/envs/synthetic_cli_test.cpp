// `crl splits` through run_cli: regeneration into a folder equals the committed files, --check passes on a
// faithful copy and names each tampered or missing file, phase3 sizes, and usage errors.
#include <filesystem>

#include "cli/command.h"
#include "engine/file_io.h"
#include "gtest/gtest.h"
#include "synthetic_test_util.h"

namespace crl::envs::synthetic {
namespace {

using testing::committed_dir;
using testing::TempDir;

int count_lines(const std::string& path) {
  const std::string content = read_file(path);
  return static_cast<int>(std::count(content.begin(), content.end(), '\n'));
}

TEST(synthetic_splits_cli, RegeneratesTheCommittedFilesAndChecksThem) {
  TempDir dir;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli::run_cli({"splits", "--namespace", "default", "--out", dir.str()}), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("split train: 240 tasks (early_fact 80, latest_update 80, ordered_plan 80)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("split test: 60 tasks"), std::string::npos) << out;
  for (const char* name : {"train.jsonl", "dev.jsonl", "test.jsonl", "MANIFEST.sha256"}) {
    EXPECT_TRUE(read_file(dir.file(name)) == read_file(committed_dir() + "/" + name)) << name;
  }
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli::run_cli({"splits", "--check", dir.str()}), 0);
  EXPECT_NE(::testing::internal::GetCapturedStdout().find("every file matches"), std::string::npos);
  EXPECT_EQ(cli::run_cli({"splits", "--check", committed_dir()}), 0);
}

TEST(synthetic_splits_cli, CheckNamesEachTamperedFile) {
  TempDir dir;
  for (const char* name : {"train.jsonl", "dev.jsonl", "test.jsonl", "MANIFEST.sha256"}) {
    std::filesystem::copy_file(committed_dir() + "/" + name, dir.file(name));
  }
  std::string dev = read_file(dir.file("dev.jsonl"));
  dev[dev.find("\"answer\":\"") + 10] ^= 1;  // one flipped bit in one answer
  write_file_atomic(dir.file("dev.jsonl"), dev);
  std::filesystem::remove(dir.file("test.jsonl"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::run_cli({"splits", "--check", dir.str()}), 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(dir.file("dev.jsonl") + ": differs from the manifest"), std::string::npos) << err;
  EXPECT_NE(err.find(dir.file("test.jsonl") + ": missing"), std::string::npos) << err;
  EXPECT_EQ(err.find("train.jsonl"), std::string::npos) << "an intact file is not named: " << err;
  EXPECT_NE(err.find("2 file(s) differ"), std::string::npos) << err;
}

TEST(synthetic_splits_cli, CheckWithoutManifestFails) {
  TempDir dir;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::run_cli({"splits", "--check", dir.str()}), 1);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("MANIFEST.sha256: missing"), std::string::npos);
}

TEST(synthetic_splits_cli, Phase3HasItsOwnSizes) {
  TempDir dir;
  EXPECT_EQ(cli::run_cli({"splits", "--namespace", "phase3", "--out", dir.str(), "--quiet"}), 0);
  EXPECT_EQ(count_lines(dir.file("train.jsonl")), 1440);
  EXPECT_EQ(count_lines(dir.file("dev.jsonl")), 180);
  EXPECT_EQ(count_lines(dir.file("test.jsonl")), 180);
  EXPECT_EQ(cli::run_cli({"splits", "--check", dir.str()}), 0);
  EXPECT_FALSE(read_file(dir.file("dev.jsonl")) == read_file(committed_dir() + "/dev.jsonl"));
}

TEST(synthetic_splits_cli, UsageErrors) {
  const TempDir dir;
  const std::string never = dir.file("never");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::run_cli({"splits", "--namespace", "phase9", "--out", never}), 1);
  EXPECT_EQ(cli::run_cli({"splits", "--check", "a", "--out", "b"}), 2);
  EXPECT_EQ(cli::run_cli({"splits", "--bogus"}), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("phase9"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(never));
}

}  // namespace
}  // namespace crl::envs::synthetic
