#pragma once
// The file system a sandboxed command sees under bubblewrap (issue 14 item 10): a root of its own, built
// fresh for every command, so nothing of the host's task folders, the project or other episodes is visible.
//
//   /usr, and /bin /sbin /lib* as the host has them (symlinks or read-only binds)   read-only system files
//   /etc: passwd, group, hosts, nsswitch.conf, ld.so.*, alternatives, localtime      read-only, nothing else
//   /proc                         a new procfs of the command's PID namespace (only its own processes)
//   /dev                          null, zero, urandom, tty, fd/std* links, a small private /dev/shm
//   /tmp, /var/tmp, /run          private size-limited tmpfs (/run/lock and /var/lock die with the command)
//   /tmp/app                      the episode's workspace (read-write), also the working directory
//   /tmp/logs                     the agent's log folder, or the verifier's fresh one
//   /tmp/tests                    the hidden tests, read-only, for the verifier only
//   /                             a tmpfs remounted read-only once the tree is built
//
// bwrap also gives new user, PID, network, IPC, UTS and cgroup namespaces (--unshare-all), drops every
// capability (--cap-drop ALL), sets no_new_privs, starts a new session (no TIOCSTI into a terminal), kills
// the command when the supervisor dies (--die-with-parent) and loads our seccomp filter (--seccomp 3).
#include <string>
#include <vector>

namespace crl::shell {

struct SandboxPaths;

// The bwrap executable ("" when none is installed).
const std::string& bwrap_executable();

// argv for `bwrap ... /bin/sh -c COMMAND` over the host folders `paths`; `seccomp_fd` >= 0 passes the filter
// program on that descriptor.
std::vector<std::string> bwrap_argv(const SandboxPaths& paths, const std::string& command, int seccomp_fd);

}  // namespace crl::shell
