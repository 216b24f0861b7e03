#include "server/session_table.h"

#include <cstdio>
#include <random>

#include "wire/api_error.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote

namespace {
std::string random_prefix() {
  std::random_device device;
  char text[16];
  std::snprintf(text, sizeof(text), "%08x", static_cast<unsigned>(device()));
  return text;
}
}  // namespace

SessionTable::SessionTable(size_t max_sessions, double idle_timeout_s)
    : max_sessions_(max_sessions), idle_timeout_s_(idle_timeout_s), id_prefix_(random_prefix()) {}

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
  std::lock_guard lock(mutex_);
  --reserved_;
  char id[48];
  std::snprintf(id, sizeof(id), "ep-%s-%06llu", id_prefix_.c_str(),
                static_cast<unsigned long long>(++counter_));
  session->id = id;
  session->touch();
  sessions_.emplace(session->id, std::move(session));
  return id;
}

std::shared_ptr<Session> SessionTable::find(const std::string& id) const {
  {
    std::lock_guard lock(mutex_);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) return it->second;
  }
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

size_t SessionTable::reap_idle() {
  std::vector<std::shared_ptr<Session>> reaped;
  {
    std::lock_guard lock(mutex_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      Session& s = *it->second;
      if (s.idle_seconds() > idle_timeout_s_ && s.mutex.try_lock()) {
        s.closed = true;
        s.mutex.unlock();
        reaped.push_back(std::move(it->second));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return reaped.size();  // the episodes are destroyed here, outside the table's lock
}

size_t SessionTable::size() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

}  // namespace crl::server
