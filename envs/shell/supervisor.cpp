#include "envs/shell/supervisor.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "envs/shell/cgroup_limits.h"
#include "envs/shell/sandbox.h"

namespace crl::shell {
namespace {

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

bool drop_to(int uid, int gid) {
  return setgroups(0, nullptr) == 0 &&
         setresgid(static_cast<gid_t>(gid), static_cast<gid_t>(gid), static_cast<gid_t>(gid)) == 0 &&
         setresuid(static_cast<uid_t>(uid), static_cast<uid_t>(uid), static_cast<uid_t>(uid)) == 0;
}

// kNamespaces: the mounts of the fallback (we are PID 1 of a new PID namespace, in a private mount tree).
void mount_fallback_tree(const ChildPlan& plan) {
  const int fd = plan.out_fd;
  // cwd keeps the scratch folder reachable after /tmp is covered: bind it from relative paths.
  if (chdir("..") != 0) child_fail(fd, "chdir ..");
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=256m,mode=1777") != 0) {
    child_fail(fd, "private /tmp");
  }
  // /run holds host sockets and /run/lock: covered, so nothing persists and no host socket is reachable.
  for (const char* dir : {"/var/tmp", "/dev/shm", "/run", "/var/lock", "/run/lock"}) {
    mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777");
  }
  // A procfs of this PID namespace: only the command's own processes.
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    child_fail(fd, "new /proc");
  struct Bind {
    const char* from;
    const char* to;
  };
  const char* app = strrchr(plan.workspace, '/') ? strrchr(plan.workspace, '/') + 1 : plan.workspace;
  const Bind binds[] = {{app, kSeenWorkspace}, {plan.tests, kSeenTests}, {plan.logs, kSeenLogs}};
  for (const Bind& b : binds) {
    if (b.from == nullptr || b.from[0] == '\0') continue;
    mkdir(b.to, 0755);
    if (mount(b.from, b.to, nullptr, MS_BIND | MS_REC, nullptr) != 0) child_fail(fd, "binding a folder");
    // nosuid: a setuid file in the workspace gives nothing.
    mount(nullptr, b.to, nullptr, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, nullptr);
  }
  if (chdir(kSeenWorkspace) != 0) child_fail(fd, "entering the workspace");
}

// Runs in the command's process (PID 1 of the new PID namespace in kNamespaces mode).
[[noreturn]] void exec_command(const ChildPlan& plan) {
  const int fd = plan.out_fd;
  if (plan.cgroup != nullptr && !plan.cgroup->join()) child_fail(fd, "joining the cgroup");
  if (plan.mode != SandboxMode::kBwrap) {
    if (chdir(plan.workspace) != 0) child_fail(fd, "entering the workspace");
    if (plan.mode == SandboxMode::kNamespaces) mount_fallback_tree(plan);
  }
  // Descriptors: 0 = /dev/null, 1 and 2 = the pipe, 3 = the seccomp program (bwrap), nothing else: the
  // server's sockets and files must not leak into the command.
  int seccomp_fd = plan.seccomp_fd;
  if (seccomp_fd >= 0) seccomp_fd = fcntl(seccomp_fd, F_DUPFD, 10);
  const int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  dup2(fd, 1);
  dup2(fd, 2);
  if (seccomp_fd >= 0) dup2(seccomp_fd, 3);
  syscall(SYS_close_range, seccomp_fd >= 0 ? 4u : 3u, ~0u, 0u);
  const SandboxLimits& l = *plan.limits;
  set_limit(RLIMIT_CPU, l.cpu_seconds);
  set_limit(RLIMIT_AS, l.memory_bytes);
  set_limit(RLIMIT_FSIZE, l.file_bytes);
  set_limit(RLIMIT_NPROC, l.processes);
  set_limit(RLIMIT_CORE, 0);
  if (plan.drop && !drop_to(l.uid, l.gid)) child_fail(1, "dropping privileges");
  if (plan.mode != SandboxMode::kBwrap) {
    // bwrap does both itself, after its own setup; here they come last before exec.
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) child_fail(1, "no_new_privs");
    if (plan.seccomp != nullptr && !plan.seccomp->empty()) {
      struct sock_fprog program;
      program.len = static_cast<unsigned short>(plan.seccomp->size() / sizeof(struct sock_filter));
      program.filter = reinterpret_cast<struct sock_filter*>(const_cast<char*>(plan.seccomp->data()));
      if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) != 0) child_fail(1, "seccomp");
    }
  }
  signal(SIGPIPE, SIG_DFL);
  execve(plan.exec_path, plan.argv, plan.envp);
  child_fail(1, "exec");
}

int64_t now_ns() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

}  // namespace

void kill_all_of_uid(int uid, int gid) {
  const pid_t helper = fork();
  if (helper == 0) {
    // kill(-1) reaches every process this uid may signal (same real or saved uid), in every PID namespace
    // below ours, and never the caller itself.
    if (drop_to(uid, gid)) kill(-1, SIGKILL);
    _exit(0);
  }
  if (helper > 0) {
    while (waitpid(helper, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

[[noreturn]] void run_supervisor(const ChildPlan& plan) {
  // Die with the caller's thread; if the caller is already gone, stop here.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != plan.caller) _exit(125);
  setpgid(0, 0);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  if (plan.mode == SandboxMode::kNamespaces) {
    const int flags = CLONE_NEWPID | CLONE_NEWNS | (plan.network ? CLONE_NEWNET : 0);
    if (unshare(flags) != 0) child_fail(plan.out_fd, "unshare");
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      child_fail(plan.out_fd, "private mounts");
  } else if (plan.mode == SandboxMode::kPlain && plan.network && unshare(CLONE_NEWNET) != 0) {
    child_fail(plan.out_fd, "unshare network");
  }
  const int64_t deadline = now_ns() + static_cast<int64_t>(plan.deadline_seconds * 1e9);
  const pid_t command = fork();
  if (command < 0) child_fail(plan.out_fd, "fork");
  if (command == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // the command's first process dies with the supervisor
    setpgid(0, 0);
    exec_command(plan);
  }
  setpgid(command, command);
  close(plan.out_fd);
  int status = 128 + SIGKILL;  // unless the command ends by itself
  for (;;) {
    int s = 0;
    const pid_t done = waitpid(command, &s, WNOHANG);
    if (done == command) {
      status = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
      break;
    }
    if (done < 0 && errno != EINTR) break;
    const int64_t left = deadline - now_ns();
    if (left <= 0) break;  // our own deadline: the caller may be stuck
    struct timespec wait;
    wait.tv_sec = left / 1000000000;
    wait.tv_nsec = left % 1000000000;
    siginfo_t info;
    if (sigtimedwait(&set, &info, &wait) == SIGTERM) break;  // the caller asks us to stop
  }
  // Kill the whole tree, however it tried to leave: the cgroup, the process group, the uid (plain mode),
  // then reap every orphan re-parented to us (bounded: 200 x 1 ms).
  for (int tries = 0; tries < 200; ++tries) {
    const bool cgroup_empty = plan.cgroup == nullptr || plan.cgroup->kill_all();
    kill(-command, SIGKILL);
    kill(command, SIGKILL);
    // Without a PID namespace a setsid'd process escapes the group kill: kill the uid. (In a PID namespace
    // everything dies with its init; the episode's end kills the uid anyway.)
    if (tries == 0 && plan.drop && plan.mode == SandboxMode::kPlain) {
      kill_all_of_uid(plan.limits->uid, plan.limits->gid);
    }
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (cgroup_empty && waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD) break;
    usleep(1000);
  }
  _exit(status);
}

}  // namespace crl::shell
