#pragma once
// Session snapshots on a shared directory (`crl serve --snapshot-dir DIR --snapshot-every N`, issue 19 item
// 2): the files that let any backend of a fleet rebuild a step-mode episode by replay (PROTOCOL.md section
// 2), and the ownership markers that let exactly one backend hold it.
//
// Files in DIR (all names derive from a checked episode id: "ep-" [TAG "-"] 32 hex digits, nothing else
// ever becomes a path):
//   <id>.snap          the snapshot: "CRLSNAP\n", format version (u32 LE), payload length (u64 LE), SHA-256
//                      of the payload (32 bytes), payload = proto SessionSnapshot (proto/snapshot.proto).
//                      Written as a temporary file in DIR, fsync'ed, renamed over the old one, and the
//                      directory fsync'ed: a reader sees the old or the new snapshot, never a mix.
//   <id>.owner.<G>     ownership markers, generation G = 0, 1, ...: the highest one names the backend
//                      instance that holds the session. Created with link(2) from a complete temporary file,
//                      which fails with EEXIST when the name exists: of two backends that claim generation
//                      G + 1 at once, exactly one wins (also on NFS, where link is atomic).
//   backends/<instance>.lock
//                      one per running backend instance ("TAG.<16 hex>"), flock(2)-ed exclusively for the
//                      process's life. The kernel drops the lock when the process ends, however it ends
//                      (SIGKILL included), so "the holder is alive" is "its lock file is still locked".
//
// A session is claimed (the holder's generation + 1) only when its holder is gone: while the holder lives
// (serving, or draining and writing its last snapshots) every other backend answers 503
// session_held_elsewhere with retry_after. The creating backend claims generation 0 with its first
// snapshot. Removing a session (DELETE, reaper) removes its snapshot and markers.
#include <cstdint>
#include <optional>
#include <string>

#include "proto/snapshot.pb.h"

namespace crl::server {

inline constexpr uint32_t kSnapshotVersion = 1;

// True for "ep-<32 hex>" and "ep-TAG-<32 hex>" (TAG: [a-z0-9]{1,16}): the only ids that may name a file.
bool is_episode_id(const std::string& id);
// The TAG of "ep-TAG-<hex>", or "" for an untagged (or malformed) id.
std::string episode_id_tag(const std::string& id);

class SnapshotStore {
 public:
  // Creates DIR and DIR/backends when absent and takes this instance's liveness lock. `tag`: the backend
  // tag ("" allowed), `address`: HOST:PORT for messages. Throws crl::Error naming the directory.
  SnapshotStore(std::string dir, const std::string& tag, std::string address);
  ~SnapshotStore();  // releases the liveness lock and removes its file
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  // The address in messages and markers, once known (crl serve --port 0 learns its port after binding).
  void set_address(const std::string& address);
  const std::string& dir() const { return dir_; }
  const std::string& instance() const { return instance_; }
  std::string snapshot_path(const std::string& id) const;

  // Writes the snapshot of `id` (payload: a serialized SessionSnapshot) atomically and durably. Throws
  // crl::Error naming the file on an I/O failure (the previous snapshot, if any, is then still intact).
  void write(const std::string& id, const std::string& payload) const;
  // The snapshot of `id`, or nullopt when there is none. A file that is truncated, of another format
  // version, corrupt, or for another episode throws wire::ApiError 500 bad_snapshot naming the file and what
  // is wrong with it.
  std::optional<proto::SessionSnapshot> read(const std::string& id) const;
  // Removes the snapshot and ownership markers of `id` (absent files are fine).
  void remove(const std::string& id) const;

  struct Claim {
    bool claimed = false;   // this instance holds the session now (or already did)
    std::string holder;     // otherwise: the live instance that holds it
    std::string holder_at;  // and its address
  };
  // Makes this instance the holder of `id` unless a live instance holds it. At most one of several
  // concurrent callers (in any process sharing DIR) gets claimed = true for a given holder's death.
  Claim claim(const std::string& id) const;
  // A live instance (other than this one) started with `tag`, or "" when there is none.
  std::string live_instance_with_tag(const std::string& tag) const;

 private:
  bool instance_alive(const std::string& instance) const;
  // The highest ownership generation of `id` (-1: none) and its marker's content.
  int64_t holder_generation(const std::string& id, std::string& content) const;
  // link(2)s a complete marker file as `<id>.owner.<generation>`; false when the name exists.
  bool link_marker(const std::string& id, int64_t generation) const;

  std::string dir_;
  std::string instance_;
  std::string address_;
  std::string lock_path_;
  int lock_fd_ = -1;
};

}  // namespace crl::server
