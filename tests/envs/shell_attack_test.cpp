// shell: the attacks of issue 14 items 9-12, each tried by an agent command (or by killing the server),
// each followed by the check that it gained nothing. The sandbox layers are described in
// envs/shell/sandbox.h and the README's table; a test skips, saying why, where a layer cannot be set up.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "envs/shell/scratch.h"
#include "tests/envs/shell_test_fixture.h"

namespace crl {
namespace {

using std::chrono::seconds;
using std::chrono::steady_clock;

// The pids of processes whose command line holds the argument `arg` (read from the host's /proc).
std::vector<pid_t> processes_with_arg(const std::string& arg) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  while (dirent* e = proc ? readdir(proc) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(std::string(1, '\0') + arg + std::string(1, '\0')) != std::string::npos) {
      out.push_back(atoi(e->d_name));
    }
  }
  if (proc) closedir(proc);
  return out;
}

// Waits (bounded) until `done()` holds; returns whether it did.
template <typename F>
bool eventually(F done, seconds bound) {
  const auto end = steady_clock::now() + bound;
  while (!done()) {
    if (steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

class ShellAttackTest : public ShellTest {
 protected:
  void SetUp() override {
    ShellTest::SetUp();
    if (!shell::probe_sandbox().bwrap) {
      GTEST_SKIP() << "bubblewrap cannot run here (" << shell::probe_sandbox().bwrap_why
                   << "): the minimal root is missing; envs/shell/README.md says what still holds";
    }
  }
  // A fresh episode of hello-file.
  std::unique_ptr<ShellEnv> start(std::map<std::string, std::string> extra = {},
                                  const std::string& id = "hello-file") {
    auto env = make(std::move(extra));
    Rng rng(StreamKey{});
    env->reset(Task{id, 0, ""}, rng);
    return env;
  }
  // A "server" (a forked child) whose episode runs `sleep <marker>` with this command timeout.
  pid_t fork_server_running_sleep(const std::string& timeout, const std::string& marker) {
    const pid_t server = fork();
    if (server == 0) {
      // Never back into gtest from here: any failure ends the child (the parent's checks then fail).
      try {
        auto env = make({{"command_timeout_sec", timeout}});
        Rng rng(StreamKey{});
        env->reset(Task{"hello-file", 0, ""}, rng);
        env->step(Action{"sleep " + marker, {}});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "forked server: %s\n", e.what());
        _exit(1);
      }
      _exit(0);
    }
    return server;
  }
  static std::string run(ShellEnv& env, const std::string& command) {
    return env.step(Action{command, {}}).observation.text;
  }
};

// Item 9: the agent writes reward.txt and makes it read-only; the verifier (hello.txt missing) must decide.
TEST_F(ShellAttackTest, RewardWrittenAndLockedByTheAgentIsIgnored) {
  auto env = start();
  run(*env,
      "mkdir -p \"$LOGS_DIR/verifier\" && echo 1 > \"$LOGS_DIR/verifier/reward.txt\" && "
      "chmod 444 \"$LOGS_DIR/verifier/reward.txt\" && chmod 555 \"$LOGS_DIR/verifier\" \"$LOGS_DIR\"");
  const StepResult done = env->step(Action{"submit", {}});
  EXPECT_EQ(done.reward, 0.0) << done.info;
  expect_normal_episode();
}

// Item 9: reward.txt as a link to a root-only host file holding "1", and to /dev/zero; by the agent (its
// log folder) and by the verifier running agent code (fix-sum-script runs the agent's sum.sh).
TEST_F(ShellAttackTest, RewardLinksAreNotFollowed) {
  add_task("no-reward", "#!/bin/sh\necho 'writes no reward'\n");
  const std::string secret = root_ + "/secret";
  write_file_atomic(secret, "1\n");
  chmod(secret.c_str(), 0600);
  for (const std::string& target : {secret, std::string("/dev/zero")}) {
    auto env = start({}, "no-reward");
    run(*env, "mkdir -p \"$LOGS_DIR/verifier\"; ln -sf " + target + " \"$LOGS_DIR/verifier/reward.txt\"");
    const auto begin = steady_clock::now();
    StepResult done = env->step(Action{"submit", {}});
    EXPECT_EQ(done.reward, 0.0) << target << ": " << done.info;
    EXPECT_LT(steady_clock::now() - begin, seconds(5));
    env = start({}, "fix-sum-script");
    run(*env, "printf '%s\\n' 'mkdir -p \"$LOGS_DIR/verifier\"; ln -sf " + target +
                  " \"$LOGS_DIR/verifier/reward.txt\"; chmod 555 \"$LOGS_DIR/verifier\"' > sum.sh");
    done = env->step(Action{"submit", {}});
    EXPECT_EQ(done.reward, 0.0) << target << ": " << done.info;
  }
  expect_normal_episode();
}

// Item 10: the project's task folders (hidden tests, solutions), the project and other episodes are not
// visible.
TEST_F(ShellAttackTest, TheHostsTaskFoldersAndOtherEpisodesAreInvisible) {
  auto other = start();
  auto env = start();
  const std::string out = run(*env, "cat " + kTasks + "/hello-file/tests/test.sh " + kTasks +
                                        "/hello-file/solution/solve.sh; ls " + std::string(CRL_SOURCE_DIR) +
                                        " " + other->scratch() + " " + root_ + "; ls /");
  EXPECT_EQ(out.find("Reward 1 if"), std::string::npos) << out;
  EXPECT_EQ(out.find("Hello, world"), std::string::npos) << out;
  EXPECT_EQ(out.find("CMakeLists.txt"), std::string::npos) << out;
  EXPECT_EQ(out.find("instruction.md"), std::string::npos) << out;
  EXPECT_EQ(out.find("boot\n"), std::string::npos) << "the host's / is listed: " << out;
  EXPECT_EQ(out.find("home\n"), std::string::npos) << "the host's / is listed: " << out;
}

// Item 11: /proc shows only the command's own processes.
TEST_F(ShellAttackTest, ProcShowsOnlyTheCommandsProcesses) {
  auto env = start();
  const std::string out =
      run(*env, "ls /proc | grep -c '^[0-9]'; cat /proc/" + std::to_string(getpid()) + "/cmdline");
  const int count = atoi(out.c_str());
  EXPECT_GT(count, 0) << out;
  EXPECT_LE(count, 6) << out;
  EXPECT_EQ(out.find("shell_attack"), std::string::npos) << out;
  EXPECT_EQ(out.find("env_coding_tests"), std::string::npos) << out;
}

// Item 11: a setuid-root binary gives the agent nothing (no_new_privs, nosuid mounts); seccomp is on.
TEST_F(ShellAttackTest, SetuidBinariesGiveNothing) {
  if (!shell::probe_sandbox().root) GTEST_SKIP() << "not root: cannot plant a setuid-root binary";
  auto env = start();
  const std::string planted = env->scratch() + "/app/myid";
  fs::copy_file("/usr/bin/id", planted);
  ASSERT_EQ(chown(planted.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(planted.c_str(), 04755), 0);
  const std::string out = run(*env, "./myid -u; grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status");
  EXPECT_NE(out.rfind("0\n", 0), 0u) << "the setuid bit gave root: " << out;
  EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
  if (shell::probe_sandbox().seccomp) {
    EXPECT_NE(out.find("Seccomp:\t2"), std::string::npos) << out;
  }
  // The filter refuses new namespaces and mounts even where the kernel would allow them.
  const std::string ns = run(*env, "unshare -r true && echo UNSHARED; mount -t tmpfs x /tmp && echo MOUNTED");
  EXPECT_EQ(ns.find("UNSHARED"), std::string::npos) << ns;
  EXPECT_EQ(ns.find("MOUNTED"), std::string::npos) << ns;
}

// Item 11: unix sockets on host paths (/run, the project's temp folders) cannot be reached.
TEST_F(ShellAttackTest, HostUnixSocketsAreUnreachable) {
  std::vector<std::string> paths = {root_ + "/host.sock"};
  if (access("/run", W_OK) == 0) paths.push_back("/run/crl-test-" + std::to_string(getpid()) + ".sock");
  std::vector<int> servers;
  for (const std::string& path : paths) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << path;
    chmod(path.c_str(), 0777);
    ASSERT_EQ(listen(fd, 4), 0);
    servers.push_back(fd);
  }
  auto env = start();
  std::string command;
  for (const std::string& path : paths) {
    command += "[ -e " + path + " ] && echo VISIBLE " + path + "; ";
    if (fs::exists("/usr/bin/python3")) {
      command += "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('" + path +
                 "'); print('CONNECTED')\" 2>/dev/null; ";
    }
  }
  const std::string out = run(*env, command);
  for (int fd : servers) close(fd);
  for (const std::string& path : paths) unlink(path.c_str());
  EXPECT_EQ(out.find("VISIBLE"), std::string::npos) << out;
  EXPECT_EQ(out.find("CONNECTED"), std::string::npos) << out;
}

// Item 11: /run/lock and /var/lock are private and die with the command.
TEST_F(ShellAttackTest, LockFoldersDoNotPersist) {
  const std::string name = "crl-test-" + std::to_string(getpid());
  auto env = start();
  run(*env, "touch /run/lock/" + name + " /var/lock/" + name + "-v");
  const bool leaked = fs::exists("/run/lock/" + name) || fs::exists("/var/lock/" + name + "-v");
  std::error_code ec;
  fs::remove("/run/lock/" + name, ec);
  fs::remove("/var/lock/" + name + "-v", ec);
  EXPECT_FALSE(leaked);
  EXPECT_NE(run(*env, "ls /run/lock/" + name + " || echo gone").find("gone"), std::string::npos);
}

// Item 11: fork past the pids limit of the whole command (cgroup pids.max, RLIMIT_NPROC).
TEST_F(ShellAttackTest, ForkingPastThePidsLimitFails) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "python3 not installed";
  auto env = start({{"processes", "16"}, {"command_timeout_sec", "5"}});
  // Counts the children it could fork (each holds its pid for 3 s); the shell, python and bwrap count too.
  const std::string out =
      run(*env,
          "python3 -c 'import os, time\nn = 0\nfor i in range(40):\n  try:\n    pid = os.fork()\n"
          "  except OSError:\n    break\n  if pid == 0:\n    time.sleep(3)\n    os._exit(0)\n  n += 1\n"
          "print(n)'");
  const int count = atoi(out.c_str());
  EXPECT_GT(count, 0) << out;
  EXPECT_LT(count, 16) << out;
  expect_normal_episode();
}

// Item 11: many processes share one memory limit (cgroup), not one each. Eight holders of 100 MiB under
// memory_mb = 256: at no moment may three hold theirs. What is counted is the survivors' holding intervals
// (from the allocation to the end of a 10 s sleep, written only by a holder that lives to the end) and their
// largest overlap: counting holders that once allocated is wrong, because the cgroup's OOM killer lets a
// third allocation succeed by killing an earlier holder (CI saw 3 "allocated" that way). Per-process limits
// alone (RLIMIT_AS) would let all eight survive together.
TEST_F(ShellAttackTest, ManyProcessesShareOneMemoryLimit) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "python3 not installed";
  if (shell::probe_sandbox().cgroup.empty()) {
    GTEST_SKIP() << "no cgroup here (" << shell::probe_sandbox().cgroup_why
                 << "): only RLIMIT_AS per process";
  }
  auto env = start({{"memory_mb", "256"}, {"command_timeout_sec", "30"}});
  const std::string out =
      run(*env,
          "printf '%s\\n' 'import sys, time' 'x = b\"x\" * (100 << 20)' 'start = time.monotonic()' "
          "'time.sleep(10)' 'open(\"held\" + sys.argv[1], \"w\").write(\"%f %f\" % (start, "
          "time.monotonic()))' > hold.py; "
          "printf '%s\\n' 'import glob' "
          "'spans = [tuple(map(float, open(f).read().split())) for f in glob.glob(\"held*\")]' "
          "'events = sorted([(a, 1) for a, b in spans] + [(b, -1) for a, b in spans])' 'now = most = 0' "
          "'for t, step in events:' '    now += step; most = max(most, now)' "
          "'print(\"survivors\", len(spans), \"overlap\", most)' > count.py; "
          "for i in 1 2 3 4 5 6 7 8; do python3 hold.py $i 2>/dev/null & done; wait; python3 count.py");
  int survivors = -1, overlap = -1;
  const size_t at = out.find("survivors ");
  ASSERT_NE(at, std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + at, "survivors %d overlap %d", &survivors, &overlap), 2) << out;
  EXPECT_GE(survivors, 1) << "no holder of 100 MiB lived under 256 MiB: " << out;
  EXPECT_LE(overlap, 2) << "8 x 100 MiB under memory_mb = 256: " << out;
  expect_normal_episode();
}

// Item 11: what a command writes is bounded by the scratch tmpfs (disk_mb), not only file by file.
TEST_F(ShellAttackTest, DiskWritesAreBoundedByTheScratchQuota) {
  if (!shell::probe_sandbox().root) GTEST_SKIP() << "not root: no tmpfs quota (documented)";
  auto env = start({{"disk_mb", "32"}, {"command_timeout_sec", "10"}});
  run(*env, "for i in 1 2 3 4 5 6; do head -c 20000000 /dev/zero > f$i; done; echo done");
  uintmax_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(env->scratch()))
    if (e.is_regular_file()) total += e.file_size();
  EXPECT_LE(total, uintmax_t{33} << 20);
  const StepResult done = env->step(Action{"rm -f f*; echo 'Hello, world!' > hello.txt", {}});
  EXPECT_EQ(env->step(Action{"submit", {}}).reward, 1.0) << done.observation.text;
}

// Item 12: after SIGKILL of the server, nothing of its sandbox keeps running, and its scratch folder is
// removed by the next server (only once its owner is dead).
TEST_F(ShellAttackTest, SandboxDiesWithAKilledServerAndItsScratchIsSwept) {
  const std::string marker = "900." + std::to_string(getpid());
  const pid_t server = fork_server_running_sleep("60", marker);
  ASSERT_GT(server, 0);
  const bool started = eventually([&] { return !processes_with_arg(marker).empty(); }, seconds(20));
  // A live server's folder survives a sweep by another server.
  EXPECT_EQ(shell::sweep_stale_scratch(root_ + "/scratch"), 0);
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  ASSERT_TRUE(started) << "the sandboxed sleep never started";
  EXPECT_TRUE(eventually([&] { return processes_with_arg(marker).empty(); }, seconds(5)))
      << "the sandboxed sleep outlived its server";
  for (pid_t p : processes_with_arg(marker)) kill(p, SIGKILL);
  EXPECT_EQ(shell::sweep_stale_scratch(root_ + "/scratch"), 1);
  EXPECT_TRUE(fs::is_empty(root_ + "/scratch"));
  expect_normal_episode();
}

// Item 12: the supervisor enforces the deadline itself, even while the server is stopped.
TEST_F(ShellAttackTest, TheDeadlineHoldsWhileTheServerIsStopped) {
  const std::string marker = "901." + std::to_string(getpid());
  const pid_t server = fork_server_running_sleep("1", marker);
  ASSERT_GT(server, 0);
  const bool started = eventually([&] { return !processes_with_arg(marker).empty(); }, seconds(20));
  kill(server, SIGSTOP);
  const bool gone = eventually([&] { return processes_with_arg(marker).empty(); }, seconds(10));
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  for (pid_t p : processes_with_arg(marker)) kill(p, SIGKILL);
  ASSERT_TRUE(started);
  EXPECT_TRUE(gone) << "the command ran past its deadline while the server was stopped";
}

// Item 11 where bubblewrap cannot run: the namespace fallback has a new /proc, private /run (/run/lock),
// no_new_privs and the seccomp filter.
TEST_F(ShellTest, TheNamespaceFallbackIsHardenedToo) {
  const shell::SandboxSupport& s = shell::probe_sandbox();
  if (!s.mount || !s.pid) GTEST_SKIP() << "no mount or PID namespace here: " << s.describe();
  const std::string app = root_ + "/fallback/app", logs = root_ + "/fallback/logs";
  fs::create_directories(app);
  fs::create_directories(logs);
  chmod((root_ + "/fallback").c_str(), 0711);
  chmod(app.c_str(), 0777);
  const std::string lock = "crl-fallback-" + std::to_string(getpid());
  shell::SandboxLimits limits;
  limits.use_bwrap = false;
  const shell::SandboxResult r = shell::run_sandboxed(
      "ls /proc | grep -c '^[0-9]'; touch /run/lock/" + lock +
          "; grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; unshare -r true && echo UNSHARED",
      {app, "", logs}, limits);
  const bool leaked = fs::exists("/run/lock/" + lock);
  std::error_code ec;
  fs::remove("/run/lock/" + lock, ec);
  EXPECT_LE(atoi(r.output.c_str()), 6) << r.output;
  EXPECT_FALSE(leaked);
  EXPECT_NE(r.output.find("NoNewPrivs:\t1"), std::string::npos) << r.output;
  if (s.seccomp) {
    EXPECT_NE(r.output.find("Seccomp:\t2"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("UNSHARED"), std::string::npos) << r.output;
  }
}

// The reward reader itself: no link on the way, a regular file, a size cap.
TEST(ShellRewardReader, RefusesLinksSpecialFilesAndBigFiles) {
  std::string pattern = "/tmp/crl-reward-reader-XXXXXX";
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  const std::string d = pattern;
  fs::create_directories(d + "/v");
  write_file_atomic(d + "/v/ok.txt", "0.5\n");
  write_file_atomic(d + "/v/big.txt", std::string(5000, '1'));
  fs::create_symlink("/etc/hostname", d + "/v/link.txt");
  fs::create_directory_symlink(d + "/v", d + "/linkdir");
  mkfifo((d + "/v/fifo.txt").c_str(), 0600);
  std::string why;
  EXPECT_EQ(shell::read_small_file_nofollow(d, "v/ok.txt", 4096, &why).value_or("?"), "0.5\n");
  for (const char* bad : {"v/big.txt", "v/link.txt", "linkdir/ok.txt", "v/fifo.txt", "v/none.txt"}) {
    why.clear();
    EXPECT_FALSE(shell::read_small_file_nofollow(d, bad, 4096, &why)) << bad;
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace crl
