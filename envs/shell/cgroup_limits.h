#pragma once
// Memory and process-count limits for a command's whole process tree (issue 14 item 11), with cgroups.
//
// RLIMIT_AS bounds one process; twelve processes of 250 MB each still take 3 GB. A cgroup bounds them
// together: memory (v2 memory.max, v1 memory.limit_in_bytes: the kernel's OOM killer picks a process of the
// group past it) and pids (pids.max: fork fails past it). Each command gets a fresh group below the server's
// own (`crl-<server pid>-<n>`), created by the parent before fork, joined by the command's process before it
// drops privileges, emptied and removed after the command; the supervisor kills everything in it at the
// deadline. Groups left by a server that died are removed by the next one (only those whose server pid is
// dead).
//
// Where: cgroup v2 when the server's group can delegate the memory and pids controllers (cgroup.controllers
// lists them and +memory +pids can be written to cgroup.subtree_control), else cgroup v1 when the memory and
// pids hierarchies are mounted and writable (this container: v1), else none: then only the per-process
// rlimits hold (cgroup_support().why says which step failed).
#include <cstdint>
#include <string>
#include <vector>

namespace crl::shell {

struct CgroupSupport {
  std::string kind;                // "v2", "v1" or "" (none)
  std::string why;                 // why none
  std::vector<std::string> bases;  // the folders new groups are made in (v2: one; v1: memory, pids)
};
const CgroupSupport& cgroup_support();

class CommandCgroup {
 public:
  CommandCgroup(int64_t memory_bytes, int64_t pids);  // ok() is false where cgroups are unavailable
  ~CommandCgroup();                                   // kills what is left, removes the groups
  CommandCgroup(const CommandCgroup&) = delete;
  CommandCgroup& operator=(const CommandCgroup&) = delete;
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

  // Async-signal-safe (for the child between fork and exec): moves the calling process in.
  bool join() const;
  // Async-signal-safe: SIGKILLs every process in the groups; true when they are empty.
  bool kill_all() const;

 private:
  bool ok_ = false;
  std::string why_;
  std::vector<std::string> dirs_;
  std::vector<int> write_fds_;      // cgroup.procs, opened for writing
  std::vector<std::string> procs_;  // the cgroup.procs paths (read afresh each time)
};

}  // namespace crl::shell
