#pragma once
// The shell environment tests' fixture (shell_env_test.cpp, shell_attack_test.cpp): a private scratch root
// and a copy of the sample tasks per test, removed at the end.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "engine/file_io.h"
#include "envs/registry.h"
#include "envs/shell/scratch.h"
#include "envs/shell/shell_env.h"

namespace crl {

inline const std::string kTasks = std::string(CRL_SOURCE_DIR) + "/data/shell_tasks";

namespace fs = std::filesystem;

class ShellTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = "/tmp/crl-shell-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    chmod(root_.c_str(), 0711);  // without namespaces the sandbox uid must traverse it
    fs::create_directories(root_ + "/tasks");
    fs::copy(kTasks, root_ + "/tasks", fs::copy_options::recursive);
  }
  void TearDown() override {
    // Scratch tmpfs mounts of "servers" a test killed (forked children) go first.
    shell::sweep_stale_scratch(root_ + "/scratch");
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::map<std::string, std::string> params(std::map<std::string, std::string> extra = {}) const {
    std::map<std::string, std::string> p = {
        {"tasks_dir", root_ + "/tasks"}, {"scratch_root", root_ + "/scratch"}, {"command_timeout_sec", "2"}};
    for (auto& [k, v] : extra) p[k] = v;
    return p;
  }
  std::unique_ptr<ShellEnv> make(std::map<std::string, std::string> extra = {}) const {
    auto env = make_env("shell", params(std::move(extra)));
    return std::unique_ptr<ShellEnv>(static_cast<ShellEnv*>(env.release()));
  }
  void add_task(const std::string& id, const std::string& test_sh, double verifier_timeout = 5) const {
    const std::string dir = root_ + "/tasks/" + id;
    write_file_atomic(dir + "/instruction.md", "Do nothing.\n");
    write_file_atomic(dir + "/task.toml", "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = " +
                                              std::to_string(verifier_timeout) + "\n");
    write_file_atomic(dir + "/tests/test.sh", test_sh);
  }
  // The next episode runs normally: hello-file solved by its two commands.
  void expect_normal_episode() const {
    auto env = make();
    Rng rng(StreamKey{});
    env->reset(Task{"hello-file", 0, ""}, rng);
    EXPECT_NE(env->step(Action{"echo 'Hello, world!' > hello.txt && cat hello.txt", {}})
                  .observation.text.find("Hello, world!\n[exit code 0]"),
              std::string::npos);
    const StepResult done = env->step(Action{"submit", {}});
    EXPECT_TRUE(done.terminated);
    EXPECT_EQ(done.reward, 1.0) << done.info;
  }
  std::string root_;
};

}  // namespace crl
