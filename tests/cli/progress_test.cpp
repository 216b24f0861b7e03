// Progress lines of long commands (issue 16 item 5, cli/progress.h): `--progress always` into a pipe shows
// done/total with the right total, the current arm and seed, and a final line; `auto` (the default) is quiet
// when stderr is not a terminal and draws on a real pseudo-terminal (util-linux `script`); the outputs are
// the same bytes with and without progress, for any --threads.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>

#include "engine/file_io.h"
#include "tests/crl_cli.h"
#include "tests/temp_dir.h"

namespace crl::cli {
namespace {

namespace fs = std::filesystem;
using test::crl;

// The toy scenario, small: per (arm, seed) 16 + 64 + 32 + 1 x 16 = 128 episodes (the start point's curve
// evaluation, training, the final evaluation, one curve point in between); 2 arms x 2 seeds = 512.
std::string small_scenario(const fs::path& dir) {
  std::string text = read_file(std::string(CRL_SOURCE_DIR) + "/scenarios/toy.pbtxt");
  const std::string training =
      "training { episodes: 1000 batch_size: 16 eval_episodes: 2000 eval_interval: 100 curve_eval_episodes: "
      "500 }";
  const size_t at = text.find(training);
  EXPECT_NE(at, std::string::npos) << "scenarios/toy.pbtxt changed its training block";
  text.replace(at, training.size(),
               "training { episodes: 64 batch_size: 16 eval_episodes: 32 eval_interval: 32 "
               "curve_eval_episodes: 16 }");
  const std::string path = (dir / "small.pbtxt").string();
  write_file_atomic(path, text);
  return path;
}

std::vector<std::string> run_args(const std::string& scenario, const fs::path& out, int threads,
                                  const std::string& progress) {
  std::vector<std::string> args = {"run",     scenario, "--out",     out.string(),
                                   "--seeds", "7,17",   "--threads", std::to_string(threads)};
  if (!progress.empty()) {
    args.push_back("--progress");
    args.push_back(progress);
  }
  return args;
}

TEST(Progress, AlwaysIntoAPipeShowsTotalsStageAndAFinalLine) {
  const test::TempDir dir;
  const std::string scenario = small_scenario(dir.path());
  const test::CliResult r = crl(run_args(scenario, dir.path() / "out", 2, "always"));
  ASSERT_EQ(r.code, 0) << r.err;
  // Not a terminal: one line per update, no carriage returns or escape codes.
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  EXPECT_EQ(r.err.find('\033'), std::string::npos);
  EXPECT_NE(r.err.find("crl run toy: 0/512 (0%), arm joint, seed 7\n"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("crl run toy: 512/512 \\(100%\\), done in [0-9.]+s\n$")))
      << r.err;
  // Every line counts towards the same total, never beyond it.
  const std::regex counts("(\\d+)/(\\d+) \\(");
  for (auto it = std::sregex_iterator(r.err.begin(), r.err.end(), counts); it != std::sregex_iterator();
       ++it) {
    EXPECT_EQ((*it)[2].str(), "512");
    EXPECT_LE(std::stoi((*it)[1].str()), 512);
  }

  // Resumed from the final checkpoints: what they hold counts as done, so the total is still reached exactly.
  std::vector<std::string> resume = run_args(scenario, dir.path() / "out", 2, "always");
  resume.push_back("--resume");
  const test::CliResult resumed = crl(resume);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_TRUE(
      std::regex_search(resumed.err, std::regex("crl run toy: 512/512 \\(100%\\), done in [0-9.]+s\n$")))
      << resumed.err;

  // crl eval on one of the run's checkpoints: its episodes (the run's eval_episodes, 32).
  std::string checkpoint;
  for (const auto& e : fs::recursive_directory_iterator(dir.path() / "out" / "checkpoints")) {
    if (e.path().extension() == ".ckpt") checkpoint = e.path().string();
  }
  ASSERT_FALSE(checkpoint.empty());
  const test::CliResult eval =
      crl({"eval", "--checkpoint", checkpoint, "--threads", "3", "--progress", "always"});
  ASSERT_EQ(eval.code, 0) << eval.err;
  EXPECT_TRUE(std::regex_search(eval.err, std::regex("crl eval: 32/32 \\(100%\\), done in [0-9.]+s\n$")))
      << eval.err;
  const test::CliResult quiet = crl({"eval", "--checkpoint", checkpoint});
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(quiet.out, eval.out);
}

TEST(Progress, AutoAndNeverAreQuietWhenStderrIsNotATerminal) {
  const test::TempDir dir;
  const std::string scenario = small_scenario(dir.path());
  for (const std::string& mode : std::vector<std::string>{"", "auto", "never"}) {
    const test::CliResult r = crl(run_args(scenario, dir.path() / ("out" + mode), 2, mode));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "") << "--progress " << mode;
  }
}

TEST(Progress, NeverChangesAResultWhateverTheThreads) {
  // One output folder (the report names it), written three times: the outputs must be the same bytes.
  const test::TempDir dir;
  const std::string scenario = small_scenario(dir.path());
  const fs::path out = dir.path() / "out";
  const auto outputs = [&] {
    std::map<std::string, std::string> files;
    for (const char* name : {"summary.json", "curves.csv", "curves.svg", "report.md"}) {
      files[name] = read_file((out / name).string());
    }
    return files;
  };
  ASSERT_EQ(crl(run_args(scenario, out, 1, "never")).code, 0);
  const auto quiet = outputs();
  ASSERT_EQ(crl(run_args(scenario, out, 3, "always")).code, 0);
  EXPECT_EQ(outputs(), quiet) << "--progress always --threads 3";
  ASSERT_EQ(crl(run_args(scenario, out, 2, "")).code, 0);
  EXPECT_EQ(outputs(), quiet) << "--threads 2";
}

TEST(Progress, BadModeIsATypedError) {
  const test::CliResult r = crl({"run", "--progress", "sometimes"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("option --progress"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\"sometimes\" is not one of auto, always, never"), std::string::npos) << r.err;
}

// A real pseudo-terminal: `script` runs the built tool with its stderr on a pty, where auto draws in place.
TEST(Progress, AutoDrawsOnATerminal) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no `script` (util-linux): the pseudo-terminal test is skipped";
  }
  const test::TempDir dir;
  const std::string scenario = small_scenario(dir.path());
  const std::string command = "timeout 120 script -q -e -c \"" + std::string(CRL_BINARY_DIR) + "/crl run " +
                              scenario + " --out " + (dir.path() / "out").string() +
                              " --seeds 7\" /dev/null </dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  ASSERT_EQ(pclose(pipe), 0) << out;
  EXPECT_NE(out.find("\r\033[Kcrl run toy: 0/256 (0%), arm joint, seed 7"), std::string::npos) << out;
  EXPECT_NE(out.find("\r\033[Kcrl run toy: 256/256 (100%), done in"), std::string::npos) << out;
}

}  // namespace
}  // namespace crl::cli
