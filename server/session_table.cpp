#include "server/session_table.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>

#include "engine/error.h"
#include "wire/api_error.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote

std::string random_episode_id(const std::string& tag) {
  // 128 bits from the kernel's CSPRNG (getrandom(2), the /dev/urandom pool), never from the engine's
  // seeded streams: nothing that shapes a trajectory reads an episode id, and nobody can guess one.
  unsigned char bytes[16];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    CRL_CHECK(n > 0, "getrandom failed (errno " << errno << ")");
    filled += static_cast<size_t>(n);
  }
  std::string id = tag.empty() ? "ep-" : "ep-" + tag + "-";
  static const char* const kHex = "0123456789abcdef";
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

SessionTable::SessionTable(size_t max_sessions, double idle_timeout_s, std::string id_tag)
    : max_sessions_(max_sessions), idle_timeout_s_(idle_timeout_s), id_tag_(std::move(id_tag)) {}

void SessionTable::reserve() {
  std::lock_guard lock(mutex_);
  if (sessions_.size() + reserved_ >= max_sessions_) {
    // A place frees up when a client deletes its episode or the reaper removes an idle one.
    const double retry_after = std::max(0.1, std::min(1.0, idle_timeout_s_));
    throw ApiError(
        429, "too_many_sessions",
        "all " + std::to_string(max_sessions_) +
            " sessions are in use; delete finished episodes (DELETE /v1/episodes/{id}) or retry later")
        .with_retry_after(retry_after);
  }
  ++reserved_;
}

void SessionTable::unreserve() {
  std::lock_guard lock(mutex_);
  --reserved_;
}

std::string SessionTable::insert(std::shared_ptr<Session> session) {
  std::string id = random_episode_id(id_tag_);
  std::lock_guard lock(mutex_);
  --reserved_;
  while (sessions_.count(id) != 0)
    id = random_episode_id(id_tag_);  // 2^-128 per pair: never, but never reuse
  session->id = id;
  session->touch();
  sessions_.emplace(id, std::move(session));
  return id;
}

bool SessionTable::insert_restored(const std::string& id, std::shared_ptr<Session> session) {
  std::lock_guard lock(mutex_);
  --reserved_;
  if (sessions_.count(id) != 0) return false;
  session->id = id;
  session->touch();
  sessions_.emplace(id, std::move(session));
  return true;
}

std::shared_ptr<Session> SessionTable::try_find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

std::shared_ptr<Session> SessionTable::find(const std::string& id) const {
  if (std::shared_ptr<Session> found = try_find(id)) return found;
  throw ApiError(404, "unknown_episode",
                 "no episode \"" + id + "\" (never created, deleted, or reaped when idle)", "episode_id");
}

bool SessionTable::erase(const std::string& id) {
  std::shared_ptr<Session> session;
  {
    std::lock_guard lock(mutex_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return false;
    session = it->second;
    sessions_.erase(it);
  }
  std::lock_guard session_lock(session->mutex);  // a request in flight finishes first
  session->closed = true;
  return true;
}

size_t SessionTable::reap_idle(std::vector<std::string>* reaped_ids) {
  std::vector<std::shared_ptr<Session>> reaped;
  {
    std::lock_guard lock(mutex_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      Session& s = *it->second;
      if (s.idle_seconds() > idle_timeout_s_ && s.mutex.try_lock()) {
        s.closed = true;
        s.mutex.unlock();
        if (reaped_ids != nullptr) reaped_ids->push_back(it->first);
        reaped.push_back(std::move(it->second));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return reaped.size();  // the episodes are destroyed here, outside the table's lock
}

std::vector<std::shared_ptr<Session>> SessionTable::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Session>> out;
  out.reserve(sessions_.size());
  for (const auto& [id, session] : sessions_) out.push_back(session);
  return out;
}

size_t SessionTable::size() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

}  // namespace crl::server
