#include "envs/shell/cgroup_limits.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace crl::shell {
namespace {

bool write_text(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool has_word(const std::string& list, const std::string& word, char separator) {
  std::stringstream in(list);
  for (std::string w; std::getline(in, w, separator);) {
    while (!w.empty() && (w.back() == '\n' || w.back() == ' ')) w.pop_back();
    if (w == word) return true;
  }
  return false;
}

// The folder of the group `path` (from /proc/self/cgroup) in a hierarchy mounted at `mount` whose root is
// `root` (mountinfo's 4th field: a container may see its own group as the root).
std::string folder_of(const std::string& mount, const std::string& root, const std::string& path) {
  std::string rel = path;
  if (root != "/" && rel.rfind(root, 0) == 0) rel = rel.substr(root.size());
  return rel == "/" || rel.empty() ? mount : mount + rel;
}

bool pid_alive(pid_t pid) {
  return kill(pid, 0) == 0 || errno == EPERM;
}

// Async-signal-safe (no allocation): SIGKILLs every pid listed in the cgroup.procs file `path`; true when
// none is listed. The file is opened afresh each time: cgroup v1 caches the list of an open file for about
// a second, and stale pids may belong to other processes by now.
bool kill_listed(const char* path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char buffer[4096];
  bool any = false;
  long pid = 0;
  bool in_number = false;
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) {
    for (ssize_t i = 0; i < n; ++i) {
      if (buffer[i] >= '0' && buffer[i] <= '9') {
        pid = pid * 10 + (buffer[i] - '0');
        in_number = true;
      } else if (in_number) {
        kill(static_cast<pid_t>(pid), SIGKILL);
        any = true;
        pid = 0;
        in_number = false;
      }
    }
  }
  if (in_number) {
    kill(static_cast<pid_t>(pid), SIGKILL);
    any = true;
  }
  close(fd);
  return !any;
}

// Removes groups `crl-<pid>-<n>` below `base` whose server pid is dead (what a killed server left).
void sweep(const std::string& base) {
  DIR* dir = opendir(base.c_str());
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    long pid = 0;
    if (sscanf(e->d_name, "crl-%ld-", &pid) != 1 || pid <= 0 || pid_alive(static_cast<pid_t>(pid))) continue;
    const std::string group = base + "/" + e->d_name;
    const std::string procs = group + "/cgroup.procs";
    for (int tries = 0; tries < 100 && !kill_listed(procs.c_str()); ++tries) usleep(1000);
    rmdir(group.c_str());
  }
  closedir(dir);
}

CgroupSupport probe() {
  CgroupSupport s;
  if (geteuid() != 0) {
    s.why = "not root (cgroup folders are root's)";
    return s;
  }
  struct Mount {
    std::string root, point, type, options;
  };
  std::vector<Mount> mounts;
  {
    std::ifstream in("/proc/self/mountinfo");
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      std::string id, parent, dev, root, point, opts, word;
      f >> id >> parent >> dev >> root >> point >> opts;
      while (f >> word && word != "-") {
      }
      Mount m{root, point, "", ""};
      std::string source;
      f >> m.type >> source >> m.options;
      if (m.type == "cgroup" || m.type == "cgroup2") mounts.push_back(m);
    }
  }
  std::string v2_path;
  std::vector<std::pair<std::string, std::string>> v1_paths;  // controllers, path
  {
    std::ifstream in("/proc/self/cgroup");
    for (std::string line; std::getline(in, line);) {
      const size_t a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (controllers.empty()) {
        v2_path = path;
      } else {
        v1_paths.emplace_back(controllers, path);
      }
    }
  }
  // v2: the server's group must hold memory and pids and let us enable them for children.
  for (const Mount& m : mounts) {
    if (m.type != "cgroup2" || v2_path.empty()) continue;
    const std::string base = folder_of(m.point, m.root, v2_path);
    const std::string controllers = read_text(base + "/cgroup.controllers");
    if (!has_word(controllers, "memory", ' ') || !has_word(controllers, "pids", ' ')) {
      s.why = "cgroup v2 at " + m.point + " does not offer the memory and pids controllers";
      continue;
    }
    if (!write_text(base + "/cgroup.subtree_control", "+memory +pids")) {
      s.why = "cannot enable memory and pids in " + base + "/cgroup.subtree_control: " + strerror(errno);
      continue;
    }
    s.kind = "v2";
    s.bases = {base};
    s.why.clear();
    break;
  }
  if (s.kind.empty()) {
    std::string memory, pids;
    for (const Mount& m : mounts) {
      if (m.type != "cgroup") continue;
      for (const auto& [controllers, path] : v1_paths) {
        for (const char* name : {"memory", "pids"}) {
          if (!has_word(m.options, name, ',') || !has_word(controllers, name, ',')) continue;
          (std::string(name) == "memory" ? memory : pids) = folder_of(m.point, m.root, path);
        }
      }
    }
    if (!memory.empty() && !pids.empty() && access(memory.c_str(), W_OK) == 0 &&
        access(pids.c_str(), W_OK) == 0) {
      s.kind = "v1";
      s.bases = {memory, pids};
      s.why.clear();
    } else if (s.why.empty()) {
      s.why = "no writable cgroup v2 or v1 memory + pids hierarchy";
    } else {
      s.why += "; no writable cgroup v1 memory + pids hierarchy either";
    }
  }
  for (const std::string& base : s.bases) sweep(base);
  return s;
}

}  // namespace

const CgroupSupport& cgroup_support() {
  static const CgroupSupport support = probe();
  return support;
}

CommandCgroup::CommandCgroup(int64_t memory_bytes, int64_t pids) {
  const CgroupSupport& s = cgroup_support();
  if (s.kind.empty()) {
    why_ = s.why;
    return;
  }
  static std::atomic<uint64_t> counter{0};
  const std::string name = "crl-" + std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1));
  for (const std::string& base : s.bases) {
    const std::string dir = base + "/" + name;
    if (mkdir(dir.c_str(), 0755) != 0) {
      why_ = "mkdir " + dir + ": " + strerror(errno);
      return;
    }
    dirs_.push_back(dir);
  }
  bool ok = true;
  if (s.kind == "v2") {
    ok = write_text(dirs_[0] + "/memory.max", std::to_string(memory_bytes)) &&
         write_text(dirs_[0] + "/pids.max", std::to_string(pids));
    write_text(dirs_[0] + "/memory.swap.max", "0");  // absent without swap accounting: best effort
  } else {
    ok = write_text(dirs_[0] + "/memory.limit_in_bytes", std::to_string(memory_bytes)) &&
         write_text(dirs_[1] + "/pids.max", std::to_string(pids));
  }
  if (!ok) {
    why_ = "cannot write the limits in " + dirs_[0] + ": " + strerror(errno);
    return;
  }
  for (const std::string& dir : dirs_) {
    procs_.push_back(dir + "/cgroup.procs");
    write_fds_.push_back(open(procs_.back().c_str(), O_WRONLY | O_CLOEXEC));
    if (write_fds_.back() < 0) {
      why_ = "cannot open " + dir + "/cgroup.procs";
      return;
    }
  }
  ok_ = true;
}

CommandCgroup::~CommandCgroup() {
  for (int tries = 0; tries < 500 && !kill_all(); ++tries) usleep(1000);
  for (int fd : write_fds_)
    if (fd >= 0) close(fd);
  // A group is removable once its last process is reaped (bounded retries while exits finish).
  for (const std::string& dir : dirs_) {
    for (int tries = 0; tries < 200 && rmdir(dir.c_str()) != 0 && errno == EBUSY; ++tries) usleep(1000);
  }
}

bool CommandCgroup::join() const {
  char text[24];
  int n = 0;
  char digits[24];
  for (long pid = getpid(); pid > 0; pid /= 10) digits[n++] = static_cast<char>('0' + pid % 10);
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  for (int fd : write_fds_) {
    if (write(fd, text, static_cast<size_t>(n)) != n) return false;
  }
  return true;
}

bool CommandCgroup::kill_all() const {
  bool empty = true;
  for (const std::string& procs : procs_) empty = kill_listed(procs.c_str()) && empty;
  return empty;
}

}  // namespace crl::shell
