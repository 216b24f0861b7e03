#pragma once
// The table of live episodes (sessions): ids, the session limit (429 with retry_after beyond it) and the
// idle reaper. Episode ids are "ep-" + 32 hex digits, 128 random bits from the kernel's CSPRNG (with a
// backend tag, `crl serve --backend-tag TAG`: "ep-TAG-" + 32 hex digits, so that a load balancer in front of
// several servers routes a path naming the episode to the server that holds it; deploy/README.md): a client
// (or an agent inside a sandbox that reaches the API) cannot guess another trainer's episode, and ids of an
// earlier server process are never reused.
//
// Concurrency: the table's own mutex guards only the id -> session map; each Session has its own mutex, held
// for the whole of a request to that episode. Requests to different episodes therefore run in parallel and
// requests to one episode are serialized. A session removed (DELETE or reaped) while a request waited for its
// mutex is marked `closed`; the waiting request then answers 404 like any request to an unknown id.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/trajectory.h"
#include "envs/episode.h"
#include "proto/server.pb.h"

namespace crl::server {

using Clock = std::chrono::steady_clock;

struct Session {
  std::mutex mutex;  // held for a whole request to this episode
  // Set once at creation (read without the mutex).
  std::string id;
  std::string env;
  std::string view;
  std::string task_id;
  double created_unix_s = 0;  // wall-clock time of creation (for the operator's list; nothing else reads it)
  // Kept up to date under `mutex` after each request, read without it by the operator's list.
  std::atomic<uint32_t> steps{0};
  std::atomic<uint32_t> compactions{0};
  std::atomic<bool> done{false};
  // Guarded by `mutex`.
  std::unique_ptr<Episode> episode;
  std::vector<TokenId> prompt;  // the prompt the client holds (to compute the next append_ids)
  uint32_t next_turn_id = 0;
  bool has_last = false;
  std::string last_action;               // the serialized action of the last applied turn (retry check)
  proto::StepResponse last_response;     // its answer, returned again for a retry
  std::optional<Trajectory> trajectory;  // built once the episode is done and exported
  bool closed = false;
  // With --snapshot-dir (server/snapshot_store.h): what rebuilds the episode by replay. Guarded by `mutex`.
  proto::CreateEpisodeRequest create;  // as the client sent it
  std::string step_log;                // the applied steps, serialized as SessionSnapshot.steps entries
  bool snapshot_current = false;       // the snapshot file holds every applied step
  bool snapshot_owner = false;         // this process holds the session's ownership marker
  bool restored = false;               // rebuilt from a snapshot by this process
  uint32_t restored_from_turn = 0;     // the turns that snapshot held
  // Steady-clock time of the last request's end (nanoseconds), read by the reaper without the mutex.
  std::atomic<int64_t> last_used_ns{0};

  void touch() { last_used_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed); }
  double idle_seconds() const {
    return static_cast<double>(Clock::now().time_since_epoch().count() - last_used_ns.load()) * 1e-9;
  }
};

class SessionTable {
 public:
  // `id_tag`: empty, or the backend tag put into every id (checked by the caller: [a-z0-9]{1,16}).
  SessionTable(size_t max_sessions, double idle_timeout_s, std::string id_tag = "");

  // Holds one of the max_sessions places while an episode is built. Throws ApiError 429 (too_many_sessions,
  // with retry_after) when every place is taken. Release it with insert() or unreserve().
  void reserve();
  void unreserve();
  // Adds a built session under a fresh random id (and consumes the reservation); returns the id.
  std::string insert(std::shared_ptr<Session> session);
  // Adds a session rebuilt from a snapshot under its original id (and consumes the reservation). False when
  // the id is taken (the caller then drops its copy and uses the one held).
  bool insert_restored(const std::string& id, std::shared_ptr<Session> session);
  // The session, or ApiError 404 unknown_episode.
  std::shared_ptr<Session> find(const std::string& id) const;
  // The session, or nullptr.
  std::shared_ptr<Session> try_find(const std::string& id) const;
  // Removes a session (waiting for a request in flight to finish). Returns false for an unknown id.
  bool erase(const std::string& id);
  // Removes sessions idle for longer than the timeout and not in use; returns how many (their ids are
  // appended to `reaped_ids` when given).
  size_t reap_idle(std::vector<std::string>* reaped_ids = nullptr);

  size_t size() const;
  // Every live session (for the operator's list, GET /v1/episodes with `crl serve --ui`).
  std::vector<std::shared_ptr<Session>> snapshot() const;
  size_t max_sessions() const { return max_sessions_; }
  double idle_timeout_s() const { return idle_timeout_s_; }

 private:
  const size_t max_sessions_;
  const double idle_timeout_s_;
  const std::string id_tag_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  size_t reserved_ = 0;
};

// A fresh episode id: "ep-" + 32 lowercase hex digits from getrandom(2); with a tag "ep-TAG-" + 32 digits.
std::string random_episode_id(const std::string& tag = "");

}  // namespace crl::server
