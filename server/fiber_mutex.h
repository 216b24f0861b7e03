#pragma once
// A lock held across waits on a fiber (server/fiber.h): a gateway session's thread's lock, held for a whole
// call, the upstream's answer included (and the session's own, held between those waits). A fiber that finds
// it held suspends (its I/O thread runs on) and is resumed, the lock handed to it, when the holder unlocks; a
// plain thread (a worker, the reaper) blocks as on a std::mutex. Waiters get the lock in arrival order.
// std::mutex here would block an I/O thread under a suspended holder that may need that very thread to
// resume: a deadlock.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

namespace crl::server {

class Fiber;

// Something a waiter does every so often while it waits (a streamed gateway call's keep-alive while it
// waits for its session's lock: gateway/stream_keepalive.h).
class Heartbeat {
 public:
  // When beat() is next due (time_point::max(): never).
  virtual std::chrono::steady_clock::time_point due() const = 0;
  // Called at or after due(); moves due() on.
  virtual void beat() = 0;

 protected:
  ~Heartbeat() = default;
};

class FiberMutex {
 public:
  FiberMutex() = default;
  FiberMutex(const FiberMutex&) = delete;
  FiberMutex& operator=(const FiberMutex&) = delete;

  void lock();
  // lock(), calling `heartbeat.beat()` whenever it is due while the lock is held by another. The waiter
  // keeps its place in the queue across its beats; the lock is handed to it as to any waiter.
  void lock(Heartbeat& heartbeat);
  bool try_lock();
  void unlock();

 private:
  struct TimedWait;  // a fiber that waits with a heartbeat (fiber_mutex.cpp)
  struct Waiter {
    std::shared_ptr<Fiber> fiber;      // a fiber, resumed on its strand; else a thread:
    bool* granted = nullptr;           // set under mutex_, then handed_ is notified
    std::shared_ptr<TimedWait> timed;  // a fiber's wait between beats (fiber set too)
  };
  std::mutex mutex_;
  std::condition_variable handed_;
  std::deque<Waiter> waiters_;
  bool locked_ = false;
};

// Releases a held FiberMutex for a scope and takes it again at the scope's end (a gateway call lets its
// session's other calls go on while it waits for the upstream, or for another call).
class ScopedUnlock {
 public:
  explicit ScopedUnlock(FiberMutex& mutex) : mutex_(mutex) { mutex_.unlock(); }
  ScopedUnlock(const ScopedUnlock&) = delete;
  ScopedUnlock& operator=(const ScopedUnlock&) = delete;
  ~ScopedUnlock() { mutex_.lock(); }

 private:
  FiberMutex& mutex_;
};

}  // namespace crl::server
