#include "envs/shell/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace crl::shell {
namespace {

using Clock = std::chrono::steady_clock;

bool wants_namespaces(const SandboxLimits& limits) {
  return limits.use_namespaces && probe_sandbox().mount && probe_sandbox().pid;
}

// ---- Child side: only system calls from here to exec (the parent may have threads). ----
[[noreturn]] void child_fail(int fd, const char* what) {
  char buffer[256];
  const int n = snprintf(buffer, sizeof buffer, "[sandbox: %s failed: %s]\n", what, strerror(errno));
  if (n > 0 && write(fd, buffer, static_cast<size_t>(n)) < 0) {
  }
  _exit(126);
}

void set_limit(int resource, int64_t value) {
  struct rlimit r;
  r.rlim_cur = static_cast<rlim_t>(value);
  r.rlim_max = static_cast<rlim_t>(value);
  setrlimit(resource, &r);
}

struct ChildPlan {
  const char* workspace;  // absolute host path
  // Relative to the workspace's parent (bound after /tmp is covered, so they must not be absolute there).
  const char* tests;
  const char* logs;
  char* const* argv;
  char* const* envp;
  int out_fd;
  bool namespaces;
  bool network;
  bool drop;
  const SandboxLimits* limits;
};

// Runs in the process that execs the shell (PID 1 of the new PID namespace, when there is one).
[[noreturn]] void exec_shell(const ChildPlan& plan) {
  const int fd = plan.out_fd;
  if (chdir(plan.workspace) != 0) child_fail(fd, "entering the workspace");
  if (plan.namespaces) {
    // cwd keeps the scratch folder reachable after /tmp is covered: bind it from relative paths.
    if (chdir("..") != 0) child_fail(fd, "chdir ..");
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=256m,mode=1777") != 0) {
      child_fail(fd, "private /tmp");
    }
    mount("tmpfs", "/var/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777");
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777");
    struct Bind {
      const char* from;
      const char* to;
    };
    const char* app = strrchr(plan.workspace, '/') ? strrchr(plan.workspace, '/') + 1 : plan.workspace;
    const Bind binds[] = {{app, "/tmp/app"}, {plan.tests, "/tmp/tests"}, {plan.logs, "/tmp/logs"}};
    for (const Bind& b : binds) {
      if (b.from == nullptr || b.from[0] == '\0') continue;
      mkdir(b.to, 0755);
      if (mount(b.from, b.to, nullptr, MS_BIND | MS_REC, nullptr) != 0) child_fail(fd, "binding a folder");
    }
    if (chdir("/tmp/app") != 0) child_fail(fd, "entering /tmp/app");
  }
  const int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  dup2(fd, 1);
  dup2(fd, 2);
  const SandboxLimits& l = *plan.limits;
  set_limit(RLIMIT_CPU, l.cpu_seconds);
  set_limit(RLIMIT_AS, l.memory_bytes);
  set_limit(RLIMIT_FSIZE, l.file_bytes);
  set_limit(RLIMIT_NPROC, l.processes);
  set_limit(RLIMIT_CORE, 0);
  if (plan.drop) {
    if (setgroups(0, nullptr) != 0 || setgid(static_cast<gid_t>(l.gid)) != 0 ||
        setuid(static_cast<uid_t>(l.uid)) != 0) {
      child_fail(1, "dropping privileges");
    }
  }
  signal(SIGPIPE, SIG_DFL);
  execve("/bin/sh", plan.argv, plan.envp);
  child_fail(1, "exec /bin/sh");
}

volatile sig_atomic_t g_stop = 0;
void on_stop(int) {
  g_stop = 1;
}

// The supervisor (the forked child): a child subreaper, so every orphan of the command is re-parented to it
// and reaped here (zombies left to a container's init would keep counting against RLIMIT_NPROC). It runs
// the shell in a process group of its own (with a PID namespace: as the namespace's init), and when the
// shell exits or the parent asks it to stop (SIGTERM: deadline, output limit) it kills that group and reaps
// until nothing is left (bounded), then exits with the shell's status.
[[noreturn]] void run_child(const ChildPlan& plan) {
  setpgid(0, 0);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_stop;
  sigaction(SIGTERM, &action, nullptr);
  if (plan.namespaces) {
    const int flags = CLONE_NEWPID | CLONE_NEWNS | (plan.network ? CLONE_NEWNET : 0);
    if (unshare(flags) != 0) child_fail(plan.out_fd, "unshare");
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      child_fail(plan.out_fd, "private mounts");
  } else if (plan.network && unshare(CLONE_NEWNET) != 0) {
    child_fail(plan.out_fd, "unshare network");
  }
  const pid_t shell = fork();
  if (shell < 0) child_fail(plan.out_fd, "fork");
  if (shell == 0) {
    signal(SIGTERM, SIG_DFL);
    setpgid(0, 0);
    exec_shell(plan);
  }
  setpgid(shell, shell);
  close(plan.out_fd);
  int status = 0;
  bool shell_done = false;
  for (;;) {
    const pid_t done = waitpid(shell, &status, 0);
    shell_done = done == shell;
    if (shell_done || g_stop || (done < 0 && errno != EINTR)) break;
  }
  if (!shell_done) status = 128 + SIGKILL;  // stopped by the parent (SIGTERM) before the shell ended
  // Kill the shell's group and reap every descendant (bounded: 200 x 1 ms).
  for (int tries = 0; tries < 200; ++tries) {
    kill(-shell, SIGKILL);
    kill(shell, SIGKILL);
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD) break;
    usleep(1000);
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

// ---- Parent side ----
class Capture {
 public:
  explicit Capture(size_t limit) : half_(limit / 2) {}
  void add(const char* data, size_t n) {
    total_ += n;
    size_t i = 0;
    while (head_.size() < half_ && i < n) head_.push_back(data[i++]);
    for (; i < n; ++i) {
      if (tail_.size() < half_) {
        tail_.push_back(data[i]);
      } else if (half_ > 0) {
        tail_[tail_start_] = data[i];
        tail_start_ = (tail_start_ + 1) % half_;
      }
    }
  }
  uint64_t total() const { return total_; }
  std::string text() const {
    std::string tail = tail_.substr(tail_start_) + tail_.substr(0, tail_start_);
    const uint64_t omitted = total_ - head_.size() - tail.size();
    if (omitted == 0) return sanitize_utf8(head_ + tail);
    return sanitize_utf8(head_) + "\n[... " + std::to_string(omitted) + " bytes of output omitted ...]\n" +
           sanitize_utf8(tail);
  }

 private:
  size_t half_;
  std::string head_, tail_;
  size_t tail_start_ = 0;
  uint64_t total_ = 0;
};

std::vector<char*> c_strings(std::vector<std::string>& items) {
  std::vector<char*> out;
  for (auto& s : items) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string SandboxSupport::describe() const {
  return std::string("network namespace: ") + (network ? "yes" : "no") +
         ", pid namespace: " + (pid ? "yes" : "no") + ", mount namespace: " + (mount ? "yes" : "no") +
         ", root (drops to an unprivileged uid): " + (root ? "yes" : "no");
}

const SandboxSupport& probe_sandbox() {
  static const SandboxSupport support = [] {
    SandboxSupport s;
    s.root = geteuid() == 0;
    auto try_flags = [](int flags, bool private_mounts) {
      const pid_t pid = fork();
      if (pid < 0) return false;
      if (pid == 0) {
        if (unshare(flags) != 0) _exit(1);
        if (private_mounts && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(1);
        if (private_mounts && mount("tmpfs", "/tmp", "tmpfs", 0, "size=1m") != 0) _exit(1);
        _exit(0);
      }
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    };
    s.network = try_flags(CLONE_NEWNET, false);
    s.pid = try_flags(CLONE_NEWPID, false);
    s.mount = try_flags(CLONE_NEWNS, true);
    return s;
  }();
  return support;
}

SandboxPaths visible_paths(const SandboxPaths& paths, const SandboxLimits& limits) {
  if (!wants_namespaces(limits)) return paths;
  return SandboxPaths{"/tmp/app", paths.tests.empty() ? "" : "/tmp/tests", "/tmp/logs"};
}

std::string sanitize_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n > 1 && i + n <= s.size()) {
      for (int k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) n = 0;
    } else if (n > 1) {
      n = 0;
    }
    if (n == 0 || (n == 1 && c < 32 && c != '\n' && c != '\t') || c == 127) {
      out.push_back('?');
      ++i;
      continue;
    }
    out.append(s, i, n);
    i += n;
  }
  return out;
}

SandboxResult run_sandboxed(const std::string& command, const SandboxPaths& paths,
                            const SandboxLimits& limits, const std::vector<std::string>& env) {
  SandboxResult result;
  const auto begin = Clock::now();
  const SandboxSupport& support = probe_sandbox();
  const bool namespaces = wants_namespaces(limits);
  // Everything the child needs is prepared before fork (no allocation in the child).
  std::vector<std::string> argv_s = {"sh", "-c", command};
  const SandboxPaths seen = visible_paths(paths, limits);
  std::vector<std::string> env_s = {
      "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + seen.workspace, "LANG=C.UTF-8",           "TMPDIR=/tmp",
      "WORKSPACE=" + seen.workspace,       "LOGS_DIR=" + seen.logs,  "TESTS_DIR=" + seen.tests};
  env_s.insert(env_s.end(), env.begin(), env.end());
  std::vector<char*> argv = c_strings(argv_s), envp = c_strings(env_s);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.error = std::string("pipe: ") + strerror(errno);
    return result;
  }
  // Inside the namespaces the folders are bound by names relative to the workspace's parent.
  auto relative = [&](const std::string& path) {
    const size_t slash = paths.workspace.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : paths.workspace.substr(0, slash + 1);
    return !parent.empty() && path.rfind(parent, 0) == 0 ? path.substr(parent.size()) : path;
  };
  const std::string tests_rel = relative(paths.tests), logs_rel = relative(paths.logs);
  ChildPlan plan{paths.workspace.c_str(),
                 tests_rel.c_str(),
                 logs_rel.c_str(),
                 argv.data(),
                 envp.data(),
                 fds[1],
                 namespaces,
                 limits.use_namespaces && support.network,
                 support.root,
                 &limits};
  const pid_t pid = fork();
  if (pid < 0) {
    result.error = std::string("fork: ") + strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return result;
  }
  if (pid == 0) {
    // The pipe's write end must survive exec: clear its close-on-exec flag (dup2 onto 1 and 2 does).
    run_child(plan);
  }
  setpgid(pid, pid);  // also done in the child; whichever runs first wins the race harmlessly
  close(fds[1]);
  result.started = true;
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  Capture capture(limits.output_bytes);
  const auto deadline = begin + std::chrono::microseconds(static_cast<int64_t>(limits.wall_seconds * 1e6));
  bool exited = false, eof = false;
  int status = 0;
  Clock::time_point exit_time;
  char buffer[65536];
  while (!eof) {
    const auto now = Clock::now();
    if (now >= deadline) {
      result.timed_out = true;
      break;
    }
    // After the shell exited, descendants that still hold the pipe get a short grace, then die.
    if (exited && now - exit_time > std::chrono::milliseconds(200)) break;
    struct pollfd p {
      fds[0], POLLIN, 0
    };
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    poll(&p, 1, static_cast<int>(std::min<int64_t>(wait_ms + 1, 20)));
    for (;;) {
      const ssize_t n = read(fds[0], buffer, sizeof buffer);
      if (n > 0) {
        capture.add(buffer, static_cast<size_t>(n));
        if (capture.total() > limits.kill_output_bytes) break;
        continue;
      }
      if (n == 0) eof = true;
      break;
    }
    if (capture.total() > limits.kill_output_bytes) {
      result.output_killed = true;
      break;
    }
    if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      exit_time = Clock::now();
    }
  }
  // The output ended normally: the supervisor is reaping; give it a moment before asking it to stop.
  for (int tries = 0; tries < 300 && eof && !exited; ++tries) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
    } else {
      usleep(1000);
    }
  }
  if (!exited) {
    // Ask the supervisor to kill and reap the command (it answers within ~0.2 s); SIGKILL it if it does not.
    kill(pid, SIGTERM);
    for (int tries = 0; tries < 500 && !exited; ++tries) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
      } else {
        usleep(1000);
      }
    }
    if (!exited) {
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  close(fds[0]);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.output_total = capture.total();
  result.output = capture.text();
  result.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
  return result;
}

}  // namespace crl::shell
