#pragma once
// The child side of run_sandboxed() (sandbox.h layers 2 and 3): only system calls from fork to exec, since
// the server may have threads. Internal to envs/shell.
#include <sys/types.h>

#include <string>

namespace crl::shell {

struct SandboxLimits;
class CommandCgroup;

enum class SandboxMode { kBwrap, kNamespaces, kPlain };

// Everything the child needs, prepared before fork (no allocation after it).
struct ChildPlan {
  SandboxMode mode = SandboxMode::kPlain;
  const char* exec_path = nullptr;  // bwrap, or /bin/sh
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  // kNamespaces/kPlain: the host workspace; kNamespaces also binds tests and logs, given relative to the
  // workspace's parent (bound after /tmp is covered, so they must not be absolute there).
  const char* workspace = nullptr;
  const char* tests = nullptr;
  const char* logs = nullptr;
  int out_fd = -1;                       // the output pipe's write end
  int seccomp_fd = -1;                   // kBwrap: a memfd holding the filter program (becomes fd 3)
  const std::string* seccomp = nullptr;  // kNamespaces/kPlain: the program, loaded with prctl
  bool network = false;                  // kNamespaces/kPlain: unshare the network
  bool drop = false;                     // root: drop to limits->uid / gid
  const SandboxLimits* limits = nullptr;
  const CommandCgroup* cgroup = nullptr;  // null where cgroups are unavailable
  pid_t caller = 0;                       // the server's pid (PR_SET_PDEATHSIG races)
  double deadline_seconds = 0;            // the supervisor's own deadline, from fork
};

// The supervisor: never returns; exits with the command's status (128 + signal when killed).
[[noreturn]] void run_supervisor(const ChildPlan& plan);

// Forks a helper that takes `uid` and kill(-1, SIGKILL)s; waits for it. Async-signal-safe.
void kill_all_of_uid(int uid, int gid);

}  // namespace crl::shell
