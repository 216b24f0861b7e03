#include "envs/shell/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>

#include "envs/shell/cgroup_limits.h"
#include "envs/shell/minimal_root.h"
#include "envs/shell/seccomp_filter.h"
#include "envs/shell/supervisor.h"

namespace crl::shell {
namespace {

using Clock = std::chrono::steady_clock;

SandboxMode mode_for(const SandboxLimits& limits) {
  const SandboxSupport& s = probe_sandbox();
  if (!limits.use_namespaces) return SandboxMode::kPlain;
  if (s.bwrap && limits.use_bwrap) return SandboxMode::kBwrap;
  return s.mount && s.pid ? SandboxMode::kNamespaces : SandboxMode::kPlain;
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

// A memfd holding the seccomp program (close-on-exec; the child moves it to fd 3 for bwrap).
int seccomp_memfd() {
  const std::string& bytes = seccomp_program().bytes;
  if (bytes.empty()) return -1;
  const int fd = memfd_create("crl-seccomp", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()) ||
      lseek(fd, 0, SEEK_SET) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Runs bwrap over a throw-away folder, as the uid commands will have, with the seccomp filter: "" when it
// works, else bwrap's message.
std::string try_bwrap(bool root) {
  if (bwrap_executable().empty()) return "bwrap is not installed (Debian package bubblewrap)";
  char folder[] = "/tmp/crl-bwrap-probe-XXXXXX";
  if (mkdtemp(folder) == nullptr) return std::string("mkdtemp: ") + strerror(errno);
  chmod(folder, 0777);
  std::vector<std::string> argv_s = bwrap_argv(SandboxPaths{folder, "", folder}, "exit 0", -1);
  const int seccomp = seccomp_memfd();
  if (seccomp >= 0) argv_s = bwrap_argv(SandboxPaths{folder, "", folder}, "exit 0", 3);
  std::vector<char*> argv = c_strings(argv_s);
  std::vector<std::string> env_s = {"PATH=/usr/bin:/bin"};
  std::vector<char*> envp = c_strings(env_s);
  int fds[2];
  std::string message;
  if (pipe2(fds, O_CLOEXEC) != 0) return std::string("pipe: ") + strerror(errno);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    // dup2 onto the same number would keep close-on-exec: move it out of the way first.
    if (seccomp >= 0) dup2(fcntl(seccomp, F_DUPFD_CLOEXEC, 10), 3);
    // The uid commands get (nobody: the probe must not use an episode's uid).
    if (root && (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
                 setresuid(65534, 65534, 65534) != 0)) {
      _exit(126);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  char buffer[512];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) {
    if (message.size() < 512) message.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (seccomp >= 0) close(seccomp);
  rmdir(folder);
  if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  while (!message.empty() && message.back() == '\n') message.pop_back();
  return "bwrap failed (status " + std::to_string(status) + "): " + sanitize_utf8(message);
}

std::vector<int> processes_of_uid(int uid) {
  std::vector<int> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream status(std::string("/proc/") + e->d_name + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Uid:", 0) != 0) continue;
      int real = -1, effective = -1, saved = -1;
      if (sscanf(line.c_str(), "Uid: %d %d %d", &real, &effective, &saved) == 3 &&
          (real == uid || effective == uid || saved == uid)) {
        pids.push_back(atoi(e->d_name));
      }
      break;
    }
  }
  closedir(proc);
  return pids;
}

}  // namespace

std::string SandboxSupport::describe() const {
  return std::string("bubblewrap: ") + (bwrap ? "yes" : "no (" + bwrap_why + ")") +
         ", seccomp: " + (seccomp ? "yes" : "no") +
         ", cgroup: " + (cgroup.empty() ? "none (" + cgroup_why + ")" : cgroup) +
         ", network namespace: " + (network ? "yes" : "no") + ", pid namespace: " + (pid ? "yes" : "no") +
         ", mount namespace: " + (mount ? "yes" : "no") +
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
    s.seccomp = !seccomp_program().bytes.empty();
    s.bwrap_why = try_bwrap(s.root);
    s.bwrap = s.bwrap_why.empty();
    s.cgroup = cgroup_support().kind;
    s.cgroup_why = cgroup_support().why;
    return s;
  }();
  return support;
}

SandboxPaths visible_paths(const SandboxPaths& paths, const SandboxLimits& limits) {
  if (mode_for(limits) == SandboxMode::kPlain) return paths;
  return SandboxPaths{kSeenWorkspace, paths.tests.empty() ? "" : kSeenTests, kSeenLogs};
}

bool kill_uid(int uid) {
  if (geteuid() != 0 || uid <= 0) return true;
  for (int tries = 0; tries < 1000; ++tries) {
    if (processes_of_uid(uid).empty()) return true;
    kill_all_of_uid(uid, uid);
    usleep(1000);
  }
  return processes_of_uid(uid).empty();
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
  const SandboxMode mode = mode_for(limits);
  // Everything the child needs is prepared before fork (no allocation in the child).
  const SandboxPaths seen = visible_paths(paths, limits);
  std::vector<std::string> env_s = {
      "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + seen.workspace, "LANG=C.UTF-8",           "TMPDIR=/tmp",
      "WORKSPACE=" + seen.workspace,       "LOGS_DIR=" + seen.logs,  "TESTS_DIR=" + seen.tests};
  env_s.insert(env_s.end(), env.begin(), env.end());
  const int seccomp = mode == SandboxMode::kBwrap ? seccomp_memfd() : -1;
  std::vector<std::string> argv_s = mode == SandboxMode::kBwrap
                                        ? bwrap_argv(paths, command, seccomp >= 0 ? 3 : -1)
                                        : std::vector<std::string>{"sh", "-c", command};
  std::vector<char*> argv = c_strings(argv_s), envp = c_strings(env_s);
  std::unique_ptr<CommandCgroup> cgroup;
  if (limits.use_namespaces && !support.cgroup.empty()) {
    cgroup = std::make_unique<CommandCgroup>(limits.memory_bytes, limits.processes);
    if (!cgroup->ok()) cgroup.reset();
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.error = std::string("pipe: ") + strerror(errno);
    if (seccomp >= 0) close(seccomp);
    return result;
  }
  // Inside the namespaces the folders are bound by names relative to the workspace's parent.
  auto relative = [&](const std::string& path) {
    const size_t slash = paths.workspace.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : paths.workspace.substr(0, slash + 1);
    return !parent.empty() && path.rfind(parent, 0) == 0 ? path.substr(parent.size()) : path;
  };
  const std::string tests_rel = relative(paths.tests), logs_rel = relative(paths.logs);
  ChildPlan plan;
  plan.mode = mode;
  plan.exec_path = mode == SandboxMode::kBwrap ? bwrap_executable().c_str() : "/bin/sh";
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.workspace = paths.workspace.c_str();
  plan.tests = tests_rel.c_str();
  plan.logs = logs_rel.c_str();
  plan.out_fd = fds[1];
  plan.seccomp_fd = seccomp;
  plan.seccomp = limits.use_namespaces ? &seccomp_program().bytes : nullptr;
  plan.network = limits.use_namespaces && support.network;
  plan.drop = support.root;
  plan.limits = &limits;
  plan.cgroup = cgroup.get();
  plan.caller = getpid();
  plan.deadline_seconds = limits.wall_seconds + 1.0;  // the caller's deadline comes first when it is alive
  const pid_t pid = fork();
  if (pid < 0) {
    result.error = std::string("fork: ") + strerror(errno);
    close(fds[0]);
    close(fds[1]);
    if (seccomp >= 0) close(seccomp);
    return result;
  }
  if (pid == 0) run_supervisor(plan);
  if (seccomp >= 0) close(seccomp);
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
