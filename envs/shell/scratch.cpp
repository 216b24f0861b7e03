#include "envs/shell/scratch.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "envs/shell/sandbox.h"

namespace crl::shell {
namespace fs = std::filesystem;

uint64_t process_start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

Scratch make_scratch(const std::string& scratch_root, int uid, int64_t disk_bytes) {
  std::error_code ec;
  fs::create_directories(scratch_root, ec);
  chmod(scratch_root.c_str(), 0711);
  const uint64_t start = process_start_time(getpid());  // not cached: a forked child is another owner
  std::string pattern = scratch_root + "/ep-" + std::to_string(getpid()) + "-" + std::to_string(start) + "-" +
                        std::to_string(uid) + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw Error(scratch_root, "scratch_root",
                std::string("cannot create a scratch folder: ") + strerror(errno));
  }
  Scratch s;
  s.path = pattern;
  if (geteuid() != 0) {
    s.why = "not root: no tmpfs quota (only RLIMIT_FSIZE bounds each file)";
  } else {
    const std::string options = "size=" + std::to_string(disk_bytes) + ",mode=0711";
    if (mount("tmpfs", s.path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) == 0) {
      s.quota = true;
    } else {
      s.why = std::string("tmpfs mount failed: ") + strerror(errno);
    }
  }
  chmod(s.path.c_str(), 0711);  // the sandbox uid may traverse it, not list or change it
  return s;
}

void remove_scratch(const std::string& path) {
  if (path.empty()) return;
  // A tmpfs: unmount first (lazily: a process of ours that still has it open must not block the episode).
  umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
  std::error_code ec;
  fs::remove_all(path, ec);
}

int sweep_stale_scratch(const std::string& scratch_root) {
  int removed = 0;
  std::error_code ec;
  // Error codes throughout: another server may sweep or remove entries at the same time.
  for (fs::directory_iterator it(scratch_root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    long pid = 0, uid = 0;
    unsigned long long start = 0;
    char rest[16];
    if (sscanf(name.c_str(), "ep-%ld-%llu-%ld-%15s", &pid, &start, &uid, rest) != 4 || pid <= 0) continue;
    std::error_code type_error;
    if (it->is_symlink(type_error) || !it->is_directory(type_error)) continue;
    const uint64_t now = process_start_time(static_cast<pid_t>(pid));
    if (now != 0 && now == start) continue;  // its server is alive
    if (uid >
        0) {  // what the dead server's agent and verifier uids left running (ShellEnv: verifier = +60000)
      kill_uid(static_cast<int>(uid));
      kill_uid(static_cast<int>(uid) + 60000);
    }
    remove_scratch(it->path().string());
    ++removed;
  }
  return removed;
}

void sweep_stale_scratch_once(const std::string& scratch_root) {
  static std::mutex mutex;
  static std::set<std::string> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (!done.insert(scratch_root).second) return;
  sweep_stale_scratch(scratch_root);
}

void chown_tree(const std::string& root, int uid, int gid) {
  struct stat top;
  if (lstat(root.c_str(), &top) != 0 || !S_ISDIR(top.st_mode)) return;
  lchown(root.c_str(), uid, gid);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st;
    if (lstat(it->path().c_str(), &st) != 0 || st.st_dev != top.st_dev) continue;
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) continue;
    lchown(it->path().c_str(), uid, gid);
  }
}

std::optional<std::string> read_small_file_nofollow(const std::string& folder, const std::string& relative,
                                                    size_t cap, std::string* why) {
  int fd = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = folder + ": " + strerror(errno);
    return std::nullopt;
  }
  std::istringstream parts(relative);
  std::string part, last;
  std::getline(parts, last, '/');
  while (std::getline(parts, part, '/')) {
    const int next = openat(fd, last.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(fd);
    if (next < 0) {
      *why = last + ": " + (errno == ELOOP || errno == ENOTDIR ? "not a folder (a link?)" : strerror(errno));
      return std::nullopt;
    }
    fd = next;
    last = part;
  }
  // O_NONBLOCK: a FIFO must not block the open; O_NOFOLLOW: a final symlink fails with ELOOP.
  const int file = openat(fd, last.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  close(fd);
  if (file < 0) {
    *why = errno == ELOOP    ? last + " is a symbolic link"
           : errno == ENOENT ? ""
                             : last + ": " + strerror(errno);
    return std::nullopt;
  }
  struct stat st;
  std::optional<std::string> out;
  if (fstat(file, &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = last + " is not a regular file";
  } else if (static_cast<uint64_t>(st.st_size) > cap) {
    *why = last + " is larger than " + std::to_string(cap) + " bytes";
  } else {
    std::string text(cap + 1, '\0');
    ssize_t total = 0;
    for (ssize_t n; total < static_cast<ssize_t>(text.size()) &&
                    (n = read(file, text.data() + total, text.size() - static_cast<size_t>(total))) > 0;) {
      total += n;
    }
    if (total > static_cast<ssize_t>(cap)) {
      *why = last + " is larger than " + std::to_string(cap) + " bytes";
    } else {
      text.resize(static_cast<size_t>(std::max<ssize_t>(total, 0)));
      out = std::move(text);
    }
  }
  close(file);
  return out;
}

}  // namespace crl::shell
