#pragma once
// The seccomp filter of a sandboxed command (issue 14 item 11), built once with libseccomp.
//
// Default: allow. Denied with EPERM: the system calls a shell task never needs and that widen the kernel's
// attack surface or undo the sandbox: new namespaces (unshare, setns, clone with CLONE_NEW*), mounts and
// root changes, kernel keyrings, modules, kexec, BPF, perf events, userfaultfd, io_uring, ptrace and
// cross-process memory access, handle-based opens (open_by_handle_at escapes bind mounts), clock and swap
// changes, and the terminal injection ioctls (TIOCSTI, TIOCLINUX). clone3 answers ENOSYS so that libc falls
// back to clone, whose flags the filter can see. Sockets other than AF_UNIX, AF_INET and AF_INET6 answer
// EAFNOSUPPORT (netlink, packet, vsock...). System calls of another architecture (32-bit int 0x80 on x86-64)
// kill the process: libseccomp's bad-architecture action.
#include <string>

namespace crl::shell {

// The classic BPF program (an array of struct sock_filter, as bytes) for `bwrap --seccomp FD` or
// prctl(PR_SET_SECCOMP); empty when the build has no libseccomp (why() says so).
struct SeccompProgram {
  std::string bytes;
  std::string why;  // non-empty when bytes is empty
};
const SeccompProgram& seccomp_program();

}  // namespace crl::shell
