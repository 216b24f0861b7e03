#include "envs/shell/seccomp_filter.h"

#if CRL_HAVE_SECCOMP
#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

namespace crl::shell {
namespace {

#if CRL_HAVE_SECCOMP
SeccompProgram build() {
  SeccompProgram out;
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) {
    out.why = "seccomp_init failed";
    return out;
  }
  bool ok = true;
  const auto deny = [&](const char* name, int error) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return;  // not a system call of this architecture
    ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(error), nr, 0) == 0;
  };
  for (const char* name : {"_sysctl",
                           "acct",
                           "add_key",
                           "adjtimex",
                           "bpf",
                           "chroot",
                           "clock_adjtime",
                           "clock_settime",
                           "delete_module",
                           "fanotify_init",
                           "finit_module",
                           "fsconfig",
                           "fsmount",
                           "fsopen",
                           "fspick",
                           "init_module",
                           "io_uring_enter",
                           "io_uring_register",
                           "io_uring_setup",
                           "kexec_file_load",
                           "kexec_load",
                           "keyctl",
                           "lookup_dcookie",
                           "mbind",
                           "migrate_pages",
                           "mount",
                           "mount_setattr",
                           "move_mount",
                           "move_pages",
                           "name_to_handle_at",
                           "nfsservctl",
                           "open_by_handle_at",
                           "open_tree",
                           "perf_event_open",
                           "pidfd_getfd",
                           "pivot_root",
                           "process_vm_readv",
                           "process_vm_writev",
                           "ptrace",
                           "quotactl",
                           "reboot",
                           "request_key",
                           "set_mempolicy",
                           "setns",
                           "settimeofday",
                           "stime",
                           "swapoff",
                           "swapon",
                           "syslog",
                           "umount",
                           "umount2",
                           "unshare",
                           "uselib",
                           "userfaultfd",
                           "vm86",
                           "vm86old"}) {
    deny(name, EPERM);
  }
  // clone: no new namespaces (the flags are the first argument on x86-64 and arm64).
  const uint64_t new_namespaces = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
                                  CLONE_NEWNET | CLONE_NEWCGROUP;
  for (const uint64_t flag :
       {uint64_t{CLONE_NEWNS}, uint64_t{CLONE_NEWUTS}, uint64_t{CLONE_NEWIPC}, uint64_t{CLONE_NEWUSER},
        uint64_t{CLONE_NEWPID}, uint64_t{CLONE_NEWNET}, uint64_t{CLONE_NEWCGROUP}}) {
    ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                SCMP_A0(SCMP_CMP_MASKED_EQ, flag & new_namespaces, flag)) == 0;
  }
  // clone3 passes its flags in memory, out of the filter's sight: ENOSYS makes libc fall back to clone.
  const int clone3 = seccomp_syscall_resolve_name("clone3");
  if (clone3 != __NR_SCMP_ERROR) ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), clone3, 0) == 0;
  for (const unsigned long request :
       {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, request)) == 0;
  }
  // socket(): only local and IP families (AF_UNIX = 1, AF_INET = 2, AF_INET6 = 10).
  ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                              SCMP_A0(SCMP_CMP_GT, AF_INET6)) == 0;
  for (int family = AF_INET + 1; family < AF_INET6; ++family) {
    ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                SCMP_A0(SCMP_CMP_EQ, static_cast<uint64_t>(family))) == 0;
  }
  ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                              SCMP_A0(SCMP_CMP_EQ, uint64_t{AF_UNSPEC})) == 0;
  if (!ok) {
    seccomp_release(ctx);
    out.why = "a seccomp rule could not be added";
    return out;
  }
  const int fd = memfd_create("crl-seccomp", MFD_CLOEXEC);
  if (fd < 0 || seccomp_export_bpf(ctx, fd) != 0) {
    if (fd >= 0) close(fd);
    seccomp_release(ctx);
    out.why = "seccomp_export_bpf failed";
    return out;
  }
  seccomp_release(ctx);
  lseek(fd, 0, SEEK_SET);
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;)
    out.bytes.append(buffer, static_cast<size_t>(n));
  close(fd);
  if (out.bytes.empty()) out.why = "the exported seccomp program is empty";
  return out;
}
#else
SeccompProgram build() {
  return SeccompProgram{"", "built without libseccomp (Debian package libseccomp-dev)"};
}
#endif

}  // namespace

const SeccompProgram& seccomp_program() {
  static const SeccompProgram program = build();
  return program;
}

}  // namespace crl::shell
