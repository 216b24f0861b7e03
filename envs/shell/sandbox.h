#pragma once
// Running one shell command in a sandbox (the `shell` environment's executor). Layers, outermost first:
//
//  1. The caller (run_sandboxed, in the server): reads the command's output with a wall-clock deadline,
//     keeping the first and the last output_bytes / 2 bytes, and asks the supervisor to stop the command at
//     the deadline or past kill_output_bytes of output. Nothing here hangs the caller longer than
//     wall_seconds + a fixed grace.
//  2. The supervisor (a forked child, supervisor.h): dies with the caller's thread (PR_SET_PDEATHSIG), is a
//     child subreaper, enforces the deadline itself (so a stuck or killed server leaves nothing running),
//     and at the end kills the command's cgroup, its process group, and every process of the sandbox uid.
//  3. The command's process: joins a fresh cgroup (cgroup_limits.h: memory and pids of the whole tree), sets
//     rlimits (CPU, address space, file size, processes, no core files), drops to the sandbox's own
//     unprivileged uid when the caller is root, and execs
//  4. bubblewrap (minimal_root.h: a root of its own with only system files and the episode's folders, new
//     user/PID/network/IPC/UTS namespaces, no capabilities, no_new_privs, a new session, the seccomp filter
//     of seccomp_filter.h), which runs `/bin/sh -c COMMAND` with stdin = /dev/null and stdout + stderr into
//     one pipe.
//
// Where bubblewrap is missing or cannot run (probe_sandbox() tries it once), the older fallback runs instead:
// our own PID, mount and network namespaces with private tmpfs on /tmp, /var/tmp, /dev/shm and /run, a new
// /proc, no_new_privs and the same seccomp filter, but the host's file system otherwise visible. With
// `use_namespaces = false` nothing of that: the host paths and network, only layers 1-3 (README table).
#include <cstdint>
#include <string>
#include <vector>

namespace crl::shell {

struct SandboxSupport {
  bool network = false;    // unshare(CLONE_NEWNET)
  bool pid = false;        // unshare(CLONE_NEWPID)
  bool mount = false;      // unshare(CLONE_NEWNS) + a private mount tree
  bool root = false;       // running as root: the command drops to `uid`
  bool bwrap = false;      // bubblewrap runs here (with our seccomp filter when there is one)
  std::string bwrap_why;   // why not
  bool seccomp = false;    // a seccomp filter is built
  std::string cgroup;      // "v2", "v1" or "" (cgroup_limits.h)
  std::string cgroup_why;  // why none
  std::string describe() const;
};
// Probed once per process (in forked children, so the caller's namespaces are never touched).
const SandboxSupport& probe_sandbox();

struct SandboxLimits {
  double wall_seconds = 10;
  int64_t cpu_seconds = 10;
  int64_t memory_bytes = int64_t{1} << 30;   // RLIMIT_AS per process, and the cgroup's memory limit
  int64_t file_bytes = int64_t{64} << 20;    // RLIMIT_FSIZE
  int64_t processes = 64;                    // RLIMIT_NPROC (per uid) and the cgroup's pids limit
  size_t output_bytes = 8192;                // kept: head + tail
  uint64_t kill_output_bytes = 16ull << 20;  // more output than this kills the command
  bool use_namespaces = true;
  bool use_bwrap = true;  // false: the namespace fallback even where bubblewrap runs (its tests)
  int uid = 65534;        // used when running as root (the shell env gives each instance its own)
  int gid = 65534;
};

// The episode's folders on the host; the command sees them at kSeenWorkspace, kSeenTests, kSeenLogs.
struct SandboxPaths {
  std::string workspace;
  std::string tests;  // may be empty (not bound); read-only
  std::string logs;
};
inline constexpr const char* kSeenWorkspace = "/tmp/app";
inline constexpr const char* kSeenTests = "/tmp/tests";
inline constexpr const char* kSeenLogs = "/tmp/logs";

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

// `env` holds extra NAME=VALUE entries. The workspace path seen by the command is
// visible_paths(...).workspace.
SandboxResult run_sandboxed(const std::string& command, const SandboxPaths& paths,
                            const SandboxLimits& limits, const std::vector<std::string>& env = {});
// Where the command sees each folder (the fixed paths above, or the host paths without namespaces).
SandboxPaths visible_paths(const SandboxPaths& paths, const SandboxLimits& limits);

// SIGKILLs every process whose real or saved uid is `uid` (from a helper that takes that uid: kill(-1)),
// until /proc lists none (bounded, about 1 s). Only as root and for uid != 0; returns whether none is left.
bool kill_uid(int uid);

// Replaces bytes that are not valid UTF-8 and control characters other than \n and \t with '?'.
std::string sanitize_utf8(const std::string& bytes);

}  // namespace crl::shell
