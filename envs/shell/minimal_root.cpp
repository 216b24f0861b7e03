#include "envs/shell/minimal_root.h"

#include <sys/stat.h>
#include <unistd.h>

#include "envs/shell/sandbox.h"

namespace crl::shell {
namespace {

bool is_symlink(const std::string& path, std::string* target) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return false;
  char buffer[4096];
  const ssize_t n = readlink(path.c_str(), buffer, sizeof buffer - 1);
  if (n <= 0) return false;
  *target = std::string(buffer, static_cast<size_t>(n));
  return true;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

const std::string& bwrap_executable() {
  static const std::string path = [] {
    for (const char* candidate : {"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"}) {
      if (access(candidate, X_OK) == 0) return std::string(candidate);
    }
    return std::string();
  }();
  return path;
}

std::vector<std::string> bwrap_argv(const SandboxPaths& paths, const std::string& command, int seccomp_fd) {
  std::vector<std::string> a = {
      bwrap_executable(), "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
      "--hostname",       "sandbox",       "--ro-bind",         "/usr",          "/usr"};
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    std::string target;
    if (is_symlink(top, &target)) {
      a.insert(a.end(), {"--symlink", target, top});
    } else if (is_directory(top)) {
      a.insert(a.end(), {"--ro-bind", top, top});
    }
  }
  a.insert(a.end(), {"--dir", "/etc"});
  for (const char* file :
       {"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ld.so.cache",
        "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime"}) {
    a.insert(a.end(), {"--ro-bind-try", file, file});
  }
  a.insert(a.end(), {"--proc", "/proc", "--tmpfs", "/dev"});
  for (const char* node : {"/dev/null", "/dev/zero", "/dev/urandom", "/dev/tty"}) {
    a.insert(a.end(), {"--dev-bind-try", node, node});
  }
  a.insert(a.end(), {"--symlink",       "/proc/self/fd",
                     "/dev/fd",         "--symlink",
                     "/proc/self/fd/0", "/dev/stdin",
                     "--symlink",       "/proc/self/fd/1",
                     "/dev/stdout",     "--symlink",
                     "/proc/self/fd/2", "/dev/stderr",
                     "--size",          std::to_string(16 << 20),
                     "--tmpfs",         "/dev/shm",
                     "--size",          std::to_string(256 << 20),
                     "--tmpfs",         "/tmp",
                     "--size",          std::to_string(16 << 20),
                     "--tmpfs",         "/var/tmp",
                     "--size",          std::to_string(1 << 20),
                     "--tmpfs",         "/run",
                     "--dir",           "/run/lock",
                     "--symlink",       "../run",
                     "/var/run",        "--symlink",
                     "../run/lock",     "/var/lock"});
  a.insert(a.end(), {"--bind", paths.workspace, kSeenWorkspace, "--bind", paths.logs, kSeenLogs});
  if (!paths.tests.empty()) a.insert(a.end(), {"--ro-bind", paths.tests, kSeenTests});
  a.insert(a.end(), {"--remount-ro", "/", "--chdir", kSeenWorkspace});
  if (seccomp_fd >= 0) a.insert(a.end(), {"--seccomp", std::to_string(seccomp_fd)});
  a.insert(a.end(), {"--", "/bin/sh", "-c", command});
  return a;
}

}  // namespace crl::shell
