#pragma once
// One call's hold on a gateway session (gateway.cpp, chat_calls.cpp): the session's lock, taken at once or
// waited for (a streamed call keeps its stream alive meanwhile: stream_keepalive.h), a session the reaper
// removed meanwhile refused as a 404, and the call's end counted as the session's last use.
#include <mutex>

#include "engine/error.h"
#include "server/fiber_mutex.h"
#include "server/gateway/gateway_error.h"
#include "server/gateway/gateway_session.h"
#include "server/gateway/stream_keepalive.h"

namespace crl::server::gateway {

// Locks a session for one call; a session the reaper removed meanwhile is a 404, and the call's end counts
// as its last use.
class SessionLock {
 public:
  explicit SessionLock(GatewaySession& session) : SessionLock(session, nullptr, [] { return false; }) {}
  // A streamed call that finds the session busy (a harness's retry behind its own call in flight) keeps
  // its stream alive while it waits (stream_keepalive.h): `streamed` says whether the call asked for a
  // stream, asked only then (a session's body is otherwise decoded under its lock, against the kept body).
  // (A template, not std::function: a call pays no allocation for its lambda.)
  template <class Streamed>
  SessionLock(GatewaySession& session, StreamKeepalive* keepalive, const Streamed& streamed)
      : session_(session), lock_(acquire(session.mutex, keepalive, streamed), std::adopt_lock) {
    if (session_.reaped) {
      throw GatewayError(404, "not_found_error", "unknown_session",
                         "session " + quote(session_.id()) +
                             " was removed meanwhile (by the idle reaper, or as its refused first call's)",
                         "session_id");
    }
  }
  ~SessionLock() { session_.touch(); }

 private:
  template <class Streamed>
  static FiberMutex& acquire(FiberMutex& mutex, StreamKeepalive* keepalive, const Streamed& streamed) {
    if (mutex.try_lock()) return mutex;
    if (keepalive != nullptr && streamed()) {
      keepalive->want();
      mutex.lock(*keepalive);
    } else {
      mutex.lock();
    }
    return mutex;
  }

  GatewaySession& session_;
  std::lock_guard<FiberMutex> lock_;
};

}  // namespace crl::server::gateway
