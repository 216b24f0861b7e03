#pragma once
// Running one shell command in a sandbox (the `shell` environment's executor).
//
// run_sandboxed() forks; the child puts itself in a new process group, enters new network, PID and mount
// namespaces where the kernel allows it (probe_sandbox() finds out once, in a throw-away child), binds the
// episode's scratch folders to fixed paths under a private /tmp (/tmp/app = workspace, /tmp/tests,
// /tmp/logs), sets resource limits (RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, no core files), drops
// to an unprivileged uid when running as root (RLIMIT_NPROC is not enforced for root), and execs
// `/bin/sh -c COMMAND` with stdin = /dev/null and stdout + stderr into one pipe.
//
// The parent reads the pipe with a wall-clock deadline, keeping the first and the last output_bytes / 2
// bytes (the middle is replaced by a marker); past kill_output_bytes of output, at the deadline, or shortly
// after the shell exits while descendants still hold the pipe, it kills the whole process group (and, with a
// PID namespace, every process of the namespace dies with its init). Nothing here can hang the caller
// longer than wall_seconds + a fixed grace.
//
// Without namespaces (an unprivileged container) the command runs in the real scratch paths, with the
// network of the host; the limits and the uid drop still apply. envs/shell/README.md lists what holds where.
#include <cstdint>
#include <string>
#include <vector>

namespace crl::shell {

struct SandboxSupport {
  bool network = false;  // unshare(CLONE_NEWNET)
  bool pid = false;      // unshare(CLONE_NEWPID)
  bool mount = false;    // unshare(CLONE_NEWNS) + a private mount tree
  bool root = false;     // running as root: the command drops to `uid`
  std::string describe() const;
};
// Probed once per process (in a forked child, so the caller's namespaces are never touched).
const SandboxSupport& probe_sandbox();

struct SandboxLimits {
  double wall_seconds = 10;
  int64_t cpu_seconds = 10;
  int64_t memory_bytes = int64_t{1} << 30;   // RLIMIT_AS
  int64_t file_bytes = int64_t{64} << 20;    // RLIMIT_FSIZE
  int64_t processes = 64;                    // RLIMIT_NPROC (per uid)
  size_t output_bytes = 8192;                // kept: head + tail
  uint64_t kill_output_bytes = 16ull << 20;  // more output than this kills the command
  bool use_namespaces = true;
  int uid = 65534;  // used when running as root (the shell env gives each instance its own)
  int gid = 65534;
};

// The episode's folders on the host; bound to /tmp/app, /tmp/tests, /tmp/logs inside the mount namespace.
struct SandboxPaths {
  std::string workspace;
  std::string tests;  // may be empty (not bound)
  std::string logs;
};

struct SandboxResult {
  bool started = false;    // false: fork/exec failed (error says why)
  int exit_code = -1;      // the shell's exit status (128 + signal if it was killed)
  bool timed_out = false;  // killed at the wall-clock deadline
  bool output_killed = false;
  uint64_t output_total = 0;  // bytes the command wrote
  std::string output;         // head + marker + tail, valid UTF-8
  std::string error;
  double wall_ms = 0;
};

// `env` holds extra NAME=VALUE entries. The workspace path seen by the command is workspace_path(paths).
SandboxResult run_sandboxed(const std::string& command, const SandboxPaths& paths,
                            const SandboxLimits& limits, const std::vector<std::string>& env = {});
// Where the command sees each folder (fixed paths under a private /tmp, or the host paths without
// namespaces).
SandboxPaths visible_paths(const SandboxPaths& paths, const SandboxLimits& limits);

// Replaces bytes that are not valid UTF-8 and control characters other than \n and \t with '?'.
std::string sanitize_utf8(const std::string& bytes);

}  // namespace crl::shell
