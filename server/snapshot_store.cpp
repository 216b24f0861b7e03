#include "server/snapshot_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "engine/error.h"
#include "engine/sha256.h"
#include "server/session_table.h"
#include "wire/api_error.h"

namespace crl::server {

using wire::ApiError;

namespace {

constexpr char kMagic[8] = {'C', 'R', 'L', 'S', 'N', 'A', 'P', '\n'};
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 32;

bool is_lower_hex(const std::string& s) {
  return s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string last_errno_text() {
  return std::strerror(errno);
}

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t get_le(const std::string& in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return value;
}

// Writes all of `data` to `fd` (EINTR and short writes retried).
bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A temporary file in `dir` holding `data`, fsync'ed; returns its path (throws crl::Error naming `target`).
std::string write_temp(const std::string& dir, const std::string& target, const std::string& data) {
  std::string path = dir + "/.tmp-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) throw Error(target, "", "cannot create a temporary file in " + dir + ": " + last_errno_text());
  const bool ok = write_all(fd, data) && ::fsync(fd) == 0;
  const std::string why = ok ? "" : last_errno_text();
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    throw Error(target, "", "cannot write " + std::to_string(data.size()) + " bytes: " + why);
  }
  return path;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

ApiError bad_snapshot(const std::string& path, const std::string& what) {
  return ApiError(500, "bad_snapshot", "snapshot file " + path + ": " + what, "episode_id");
}

}  // namespace

bool is_episode_id(const std::string& id) {
  if (id.size() < 3 + 32 || id.compare(0, 3, "ep-") != 0) return false;
  const std::string hex = id.substr(id.size() - 32);
  if (!is_lower_hex(hex)) return false;
  if (id.size() == 3 + 32) return true;
  // "ep-" TAG "-" hex
  const std::string tag = id.substr(3, id.size() - 3 - 32 - 1);
  return id[id.size() - 33] == '-' && !tag.empty() && tag.size() <= 16 &&
         tag.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") == std::string::npos;
}

std::string episode_id_tag(const std::string& id) {
  if (!is_episode_id(id) || id.size() == 3 + 32) return "";
  return id.substr(3, id.size() - 3 - 33);
}

SnapshotStore::SnapshotStore(std::string dir, const std::string& tag, std::string address)
    : dir_(std::move(dir)), address_(std::move(address)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  const std::string backends = dir_ + "/backends";
  for (const std::string& d : {dir_, backends}) {
    if (::mkdir(d.c_str(), 0777) != 0 && errno != EEXIST)
      throw Error("option --snapshot-dir", "",
                  "cannot create directory " + quote(d) + ": " + last_errno_text());
    struct stat st {};
    if (::stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw Error("option --snapshot-dir", "", quote(d) + " is not a directory");
  }
  // The instance: the tag (or "untagged") and 64 random bits, so that a restarted backend with the same tag
  // is a different instance from the one that died.
  instance_ = (tag.empty() ? std::string("untagged") : tag) + "." + random_episode_id().substr(3, 16);
  lock_path_ = backends + "/" + instance_ + ".lock";
  lock_fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    throw Error("option --snapshot-dir", "", "cannot lock " + quote(lock_path_) + ": " + last_errno_text());
  }
  set_address(address_);
}

void SnapshotStore::set_address(const std::string& address) {
  address_ = address;
  if (::ftruncate(lock_fd_, 0) == 0 && ::lseek(lock_fd_, 0, SEEK_SET) == 0)
    write_all(lock_fd_, address_ + " pid " + std::to_string(::getpid()) + "\n");
}

SnapshotStore::~SnapshotStore() {
  if (lock_fd_ >= 0) {
    ::unlink(lock_path_.c_str());  // first: "no lock file" also reads as "gone"
    ::close(lock_fd_);
  }
}

std::string SnapshotStore::snapshot_path(const std::string& id) const {
  return dir_ + "/" + id + ".snap";
}

void SnapshotStore::write(const std::string& id, const std::string& payload) const {
  const std::string target = snapshot_path(id);
  std::array<uint8_t, 32> digest = Sha256().update(payload).digest();
  std::string file(kMagic, sizeof kMagic);
  put_le(file, kSnapshotVersion, 4);
  put_le(file, payload.size(), 8);
  file.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  file += payload;
  const std::string temp = write_temp(dir_, target, file);
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    const std::string why = last_errno_text();
    ::unlink(temp.c_str());
    throw Error(target, "", "cannot rename the temporary snapshot into place: " + why);
  }
  fsync_dir(dir_);
}

std::optional<proto::SessionSnapshot> SnapshotStore::read(const std::string& id) const {
  const std::string path = snapshot_path(id);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw bad_snapshot(path, "cannot open: " + last_errno_text());
  }
  std::string file;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = last_errno_text();
      ::close(fd);
      throw bad_snapshot(path, "cannot read: " + why);
    }
    if (n == 0) break;
    file.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  if (file.size() < kHeaderBytes) {
    throw bad_snapshot(path, "truncated: " + std::to_string(file.size()) + " bytes, shorter than the " +
                                 std::to_string(kHeaderBytes) + "-byte header");
  }
  if (file.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0)
    throw bad_snapshot(path, "not a crl snapshot (it does not start with CRLSNAP)");
  const uint64_t version = get_le(file, 8, 4);
  if (version != kSnapshotVersion) {
    throw bad_snapshot(path, "format version " + std::to_string(version) + ", but this crl reads version " +
                                 std::to_string(kSnapshotVersion));
  }
  const uint64_t length = get_le(file, 12, 8);
  if (length != file.size() - kHeaderBytes) {
    throw bad_snapshot(path, "truncated or padded: the header announces " + std::to_string(length) +
                                 " payload bytes, the file holds " +
                                 std::to_string(file.size() - kHeaderBytes));
  }
  const std::string payload = file.substr(kHeaderBytes);
  const std::array<uint8_t, 32> digest = Sha256().update(payload).digest();
  if (file.compare(20, 32, reinterpret_cast<const char*>(digest.data()), 32) != 0)
    throw bad_snapshot(path, "corrupt: the payload's SHA-256 differs from the header's");
  proto::SessionSnapshot snapshot;
  if (!snapshot.ParseFromString(payload)) throw bad_snapshot(path, "the payload is not a SessionSnapshot");
  if (snapshot.version() != kSnapshotVersion) {
    throw bad_snapshot(path, "payload version " + std::to_string(snapshot.version()) + ", expected " +
                                 std::to_string(kSnapshotVersion));
  }
  if (snapshot.episode_id() != id)
    throw bad_snapshot(path, "it holds episode " + quote(snapshot.episode_id()) + ", not " + quote(id));
  if (static_cast<uint32_t>(snapshot.steps_size()) != snapshot.turns()) {
    throw bad_snapshot(path, "it announces " + std::to_string(snapshot.turns()) + " turns but logs " +
                                 std::to_string(snapshot.steps_size()) + " steps");
  }
  return snapshot;
}

void SnapshotStore::remove(const std::string& id) const {
  ::unlink(snapshot_path(id).c_str());
  std::string ignored;
  for (int64_t g = holder_generation(id, ignored); g >= 0; --g)
    ::unlink((dir_ + "/" + id + ".owner." + std::to_string(g)).c_str());
}

int64_t SnapshotStore::holder_generation(const std::string& id, std::string& content) const {
  // Generations are dense (each is claimed as the previous one's + 1), so probing upwards finds the last.
  int64_t g = -1;
  for (;;) {
    std::ifstream in(dir_ + "/" + id + ".owner." + std::to_string(g + 1));
    if (!in) break;
    std::getline(in, content);
    ++g;
  }
  return g;
}

bool SnapshotStore::link_marker(const std::string& id, int64_t generation) const {
  const std::string name = dir_ + "/" + id + ".owner." + std::to_string(generation);
  const std::string temp = write_temp(dir_, name, instance_ + " " + address_ + "\n");
  const int rc = ::link(temp.c_str(), name.c_str());
  const int error = errno;
  ::unlink(temp.c_str());
  if (rc == 0) {
    fsync_dir(dir_);
    return true;
  }
  if (error == EEXIST) return false;
  throw Error(name, "", std::string("cannot create the ownership marker: ") + std::strerror(error));
}

bool SnapshotStore::instance_alive(const std::string& instance) const {
  if (instance == instance_) return true;
  if (instance.empty() || instance.find('/') != std::string::npos) return false;
  const std::string path = dir_ + "/backends/" + instance + ".lock";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // removed at a clean exit
  // A lock taken by another open file description (another process, or another store in this process)
  // conflicts with ours; a dead process holds none.
  const bool alive = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // drops our lock, if we got it
  return alive;
}

SnapshotStore::Claim SnapshotStore::claim(const std::string& id) const {
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string content;
    const int64_t g = holder_generation(id, content);
    const std::string holder = content.substr(0, content.find(' '));
    if (g >= 0 && holder == instance_) return {true, "", ""};
    if (g >= 0 && instance_alive(holder)) {
      const size_t space = content.find(' ');
      return {false, holder, space == std::string::npos ? "" : content.substr(space + 1)};
    }
    if (link_marker(id, g + 1)) return {true, "", ""};
    // Another instance claimed generation g + 1 first: look again (it is alive, so we lose).
  }
  return {false, "(unknown: the ownership markers kept changing)", ""};
}

std::string SnapshotStore::live_instance_with_tag(const std::string& tag) const {
  DIR* d = ::opendir((dir_ + "/backends").c_str());
  if (d == nullptr) return "";
  std::string found;
  const std::string prefix = tag + ".";
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name.size() <= prefix.size() + 5 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - 5, 5, ".lock") != 0)
      continue;
    const std::string instance = name.substr(0, name.size() - 5);
    if (instance != instance_ && instance_alive(instance)) {
      found = instance;
      break;
    }
  }
  ::closedir(d);
  return found;
}

}  // namespace crl::server
