// `crl run` killed with SIGKILL at any moment (issue 14 item 13, issue 16 item 2): the output folder never
// holds a mix of two runs' result files without the INCOMPLETE marker, the next run leaves no temporaries,
// and `--resume` then writes summary.json, curves.csv, curves.svg and report.md byte-identical to an
// uninterrupted run, for any --threads.
//
// The runs are child processes (fork, then the CLI in process) so that the test can kill them:
//  * at every durable write in turn (the CRL_TEST_KILL_AFTER_WRITES hook of scenarios/output_set.h: each
//    checkpoint, each staged file, the marker, each rename into place, the marker's removal);
//  * at pseudo-random times (a fixed seed) over the length of an uninterrupted run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "cli/command.h"
#include "engine/file_io.h"
#include "scenarios/output_set.h"
#include "tests/temp_dir.h"

namespace crl::scenarios {
namespace {

namespace fs = std::filesystem;

// A unique folder from tests/temp_dir.h, with its path as a string.
struct TempDir {
  crl::test::TempDir folder;
  std::string path = folder.str();
};

const char* kOutputs[] = {"summary.json", "curves.csv", "curves.svg", "report.md"};

// The toy, reduced: 2 arms x 96 episodes, a checkpoint every 32 (a run takes a fraction of a second; the
// test's time goes to the fsyncs).
const char* kScenario = R"(name: "resume_toy"
base {
  env {
    name: "memory_chain"
    params { key: "length" value: "2" }
    params { key: "reset_points" value: "1" }
  }
  view: "symbolic"
  budget { capacity: 256 reserve: 16 tail_k: 2 per_turn_cap: 4 summary_cap: 4 max_compactions: 1 }
  policy { name: "tabular" }
  training { episodes: 96 batch_size: 16 eval_episodes: 100 eval_interval: 48 curve_eval_episodes: 40
             checkpoint_every: 32 }
}
seeds: [7]
arm { name: "joint" }
arm { name: "frozen" set { policy { params { key: "frozen_summary" value: "true" } } } }
)";

// Runs `crl ARGS` in a child process; kill_after > 0 sets the test hook. Returns the wait status.
pid_t start(const std::vector<std::string>& args, long kill_after) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (kill_after > 0) ::setenv("CRL_TEST_KILL_AFTER_WRITES", std::to_string(kill_after).c_str(), 1);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    // Never return into gtest from the child, whatever happens.
    int code = 100;
    try {
      code = cli::run_cli(args);
    } catch (...) {
    }
    ::_exit(code);
  }
  return pid;
}
int finish(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}
int run(const std::vector<std::string>& args, long kill_after = 0) {
  return finish(start(args, kill_after));
}

using FileSet = std::map<std::string, std::optional<std::string>>;
FileSet outputs(const std::string& dir) {
  FileSet set;
  for (const char* name : kOutputs) {
    const fs::path path = fs::path(dir) / name;
    set[name] = fs::exists(path) ? std::optional<std::string>(read_file(path.string())) : std::nullopt;
  }
  return set;
}

std::vector<std::string> temporaries(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp.") != std::string::npos || name.rfind(".staging.", 0) == 0) {
      found.push_back(entry.path().string());
    }
  }
  return found;
}

class KillAndResume : public ::testing::Test {
 protected:
  void SetUp() override {
    scenario_ = (fs::path(files_.path) / "resume_toy.pbtxt").string();
    write_file_atomic(scenario_, kScenario);
    out_ = (fs::path(files_.path) / "out").string();
    // The uninterrupted run, in the folder the test uses (the report names it), and an older result set of
    // another run (other seeds) that the killed runs replace.
    ASSERT_EQ(run(command(false, 1)), 0);
    reference_ = outputs(out_);
    for (const auto& [name, content] : reference_) ASSERT_TRUE(content.has_value()) << name;
    fs::remove_all(out_);
    ASSERT_EQ(run({"run", scenario_, "--out", out_, "--seeds", "5,6"}), 0);
    older_ = outputs(out_);
    ASSERT_NE(older_, reference_);
    fs::copy(out_, files_.path + "/older", fs::copy_options::recursive);
  }

  std::vector<std::string> command(bool resume, int threads) const {
    std::vector<std::string> args = {"run", scenario_, "--out", out_, "--threads", std::to_string(threads)};
    if (resume) args.push_back("--resume");
    return args;
  }

  // Back to the older complete set, as if the killed run had never started.
  void restore_older() {
    fs::remove_all(out_);
    fs::copy(files_.path + "/older", out_, fs::copy_options::recursive);
  }

  // What a killed run may leave: the older set, the new set, or anything with the INCOMPLETE marker.
  void expect_consistent(const std::string& when) {
    if (fs::exists(fs::path(out_) / kIncompleteMarker)) return;
    const FileSet now = outputs(out_);
    EXPECT_TRUE(now == older_ || now == reference_) << when << ": a mixed result set without the marker";
  }

  // Resumes (with `threads`) and checks the final state: the uninterrupted bytes, no marker, no temporaries.
  void resume_and_check(const std::string& when, int threads) {
    ASSERT_EQ(run(command(true, threads)), 0) << when;
    EXPECT_EQ(outputs(out_), reference_) << when << ": the resumed run's outputs differ";
    EXPECT_FALSE(fs::exists(fs::path(out_) / kIncompleteMarker)) << when;
    EXPECT_EQ(temporaries(out_), std::vector<std::string>{}) << when;
  }

  TempDir files_;
  std::string scenario_, out_;
  FileSet reference_, older_;
};

TEST_F(KillAndResume, AtEveryDurableWrite) {
  int writes = 0;
  for (long n = 1;; ++n) {
    const std::string when = "killed after durable write " + std::to_string(n);
    restore_older();
    const int status = run(command(false, 1), n);
    if (WIFEXITED(status)) {  // the run has fewer writes: it finished
      ASSERT_EQ(WEXITSTATUS(status), 0);
      EXPECT_EQ(outputs(out_), reference_);
      break;
    }
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << when;
    ++writes;
    expect_consistent(when);
    // Every other time a resumed run is killed as well (a few writes later), then resumed to the end with
    // another thread count.
    if (n % 2 == 1) {
      const int again = run(command(true, 2), 3);
      if (WIFSIGNALED(again)) expect_consistent(when + ", and the resumed run after 3 more");
    }
    resume_and_check(when, 1 + static_cast<int>(n % 2));
  }
  // 2 arms x 3 checkpoints, 4 staged files, the marker, 4 renames, the marker's removal.
  EXPECT_EQ(writes, 6 + 4 + 1 + 4 + 1);
}

TEST_F(KillAndResume, AtRandomTimes) {
  // The length of an uninterrupted run, to spread the kills over it.
  restore_older();
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(run(command(false, 1)), 0);
  const auto length = std::chrono::steady_clock::now() - t0;
  std::mt19937_64 random(20261201);
  for (int i = 0; i < 5; ++i) {
    restore_older();
    const auto delay = std::chrono::duration_cast<std::chrono::microseconds>(length) *
                       std::uniform_real_distribution<double>(0.0, 1.0)(random);
    const std::string when = "killed at " + std::to_string(delay.count()) + " us";
    const pid_t pid = start(command(false, 2), 0);
    std::this_thread::sleep_for(delay);
    ::kill(pid, SIGKILL);
    finish(pid);
    expect_consistent(when);
    resume_and_check(when, 1 + i % 2);
  }
}

TEST(OutputSet, StaleTemporariesOfDeadProcessesAreRemovedLiveOnesKept) {
  TempDir dir;
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  finish(dead);  // reaped: the pid no longer exists
  const std::string stale_file =
      dir.path + "/checkpoints/joint/seed-7/episode-0000000032.ckpt.tmp." + std::to_string(dead);
  const std::string stale_folder = dir.path + "/.staging." + std::to_string(dead);
  const std::string live_file = dir.path + "/summary.json.tmp." + std::to_string(::getppid());
  write_file_atomic(stale_file, "x");
  write_file_atomic(stale_folder + "/report.md", "x");
  write_file_atomic(live_file, "x");
  write_file_atomic(dir.path + "/notes.tmp.txt", "x");  // not ours: kept
  EXPECT_EQ(remove_stale_temporaries(dir.path), 2);
  EXPECT_FALSE(fs::exists(stale_file));
  EXPECT_FALSE(fs::exists(stale_folder));
  EXPECT_TRUE(fs::exists(live_file));
  EXPECT_TRUE(fs::exists(dir.path + "/notes.tmp.txt"));
}

}  // namespace
}  // namespace crl::scenarios
