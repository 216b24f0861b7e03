#include "scenarios/output_set.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/error.h"

namespace crl::scenarios {

namespace fs = std::filesystem;

namespace {

// The test hook (header comment): counts durable steps and kills the process at the configured one.
// The variable is read on every step and the count restarts in a forked child, so that a test may fork a
// process that has written files before and set the variable in the child.
void durable_step() {
  const char* value = std::getenv("CRL_TEST_KILL_AFTER_WRITES");
  if (value == nullptr) return;
  static pid_t counting_pid = 0;
  static long steps = 0;
  if (counting_pid != ::getpid()) {
    counting_pid = ::getpid();
    steps = 0;
  }
  if (++steps == std::atol(value)) ::raise(SIGKILL);
}

std::string errno_text() {
  return std::strerror(errno);
}

// fsync of a file or folder by path; a folder's fsync makes the renames inside it durable.
void sync_path(const std::string& path, bool folder, const std::string& where) {
  const int fd = ::open(path.c_str(), (folder ? O_RDONLY | O_DIRECTORY : O_WRONLY) | O_CLOEXEC);
  if (fd < 0) throw Error(where, "", "cannot open " + path + " to sync it: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) throw Error(where, "", "fsync of " + path + " failed: " + why);
}

std::string parent_of(const fs::path& path) {
  return path.has_parent_path() ? path.parent_path().string() : std::string(".");
}

// "NAME.tmp.PID" and ".staging.PID" -> PID; 0 for any other name.
pid_t temporary_pid(const std::string& name) {
  std::string digits;
  if (name.rfind(".staging.", 0) == 0) {
    digits = name.substr(9);
  } else if (const size_t at = name.rfind(".tmp."); at != std::string::npos) {
    digits = name.substr(at + 5);
  }
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return 0;
  }
  return static_cast<pid_t>(std::atol(digits.c_str()));
}

bool process_gone(pid_t pid) {
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

void write_file_durable(const std::string& path, const std::string& content) {
  const fs::path target(path);
  std::error_code ec;
  // Folders this call creates are made durable too (each one's entry lives in its own parent).
  std::vector<fs::path> created;
  for (fs::path p = target.parent_path(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    created.push_back(p);
    if (p == p.parent_path()) break;
  }
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) throw Error(path, "", "cannot create the parent folder: " + ec.message());
  for (const fs::path& folder : created) sync_path(parent_of(folder), true, path);
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path, "", "cannot write file: " + errno_text());
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  const bool ok = written == content.size() && ::fsync(fd) == 0;
  const std::string why = ok ? "" : errno_text();
  ::close(fd);
  if (!ok) {
    fs::remove(temp, ec);
    throw Error(path, "", "write failed: " + why);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = errno_text();
    fs::remove(temp, ec);
    throw Error(path, "", "cannot move the finished file into place: " + reason);
  }
  sync_path(parent_of(target), true, path);
  durable_step();
}

void publish_files(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir, "", "cannot create the output folder: " + ec.message());
  const fs::path staging = fs::path(dir) / (".staging." + std::to_string(::getpid()));
  fs::remove_all(staging, ec);
  for (const auto& [name, content] : files) write_file_durable((staging / name).string(), content);
  const std::string marker = (fs::path(dir) / kIncompleteMarker).string();
  write_file_durable(marker,
                     "crl run was stopped while it replaced the result files of this folder: they may come "
                     "from two different runs. Run it again (--resume continues from the checkpoints).\n");
  for (const auto& [name, content] : files) {
    const std::string from = (staging / name).string(), to = (fs::path(dir) / name).string();
    if (::rename(from.c_str(), to.c_str()) != 0) {
      throw Error(to, "", "cannot move the finished file into place: " + errno_text());
    }
    sync_path(dir, true, to);
    durable_step();
  }
  if (::unlink(marker.c_str()) != 0) throw Error(marker, "", "cannot remove the marker: " + errno_text());
  sync_path(dir, true, marker);
  durable_step();
  fs::remove_all(staging, ec);
}

int remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  std::vector<fs::path> stale;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_symlink(ec)) continue;  // never follow or delete through links
    const pid_t pid = temporary_pid(it->path().filename().string());
    if (pid > 0 && pid != ::getpid() && process_gone(pid)) {
      stale.push_back(it->path());
      if (it->is_directory(ec)) it.disable_recursion_pending();
    }
  }
  int removed = 0;
  for (const fs::path& path : stale) removed += fs::remove_all(path, ec) > 0 ? 1 : 0;
  return removed;
}

}  // namespace crl::scenarios
