#pragma once
// A lock held across waits on a fiber (server/fiber.h): a gateway session's lock, held for a whole call, the
// upstream's answer included. A fiber that finds it held suspends (its I/O thread runs on) and is resumed,
// the lock handed to it, when the holder unlocks; a plain thread (a worker, the reaper) blocks as on a
// std::mutex. Waiters get the lock in arrival order. std::mutex here would block an I/O thread under a
// suspended holder that may need that very thread to resume: a deadlock.
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

namespace crl::server {

class Fiber;

class FiberMutex {
 public:
  FiberMutex() = default;
  FiberMutex(const FiberMutex&) = delete;
  FiberMutex& operator=(const FiberMutex&) = delete;

  void lock();
  bool try_lock();
  void unlock();

 private:
  struct Waiter {
    std::shared_ptr<Fiber> fiber;  // a fiber, resumed on its strand; else a thread:
    bool* granted = nullptr;       // set under mutex_, then handed_ is notified
  };
  std::mutex mutex_;
  std::condition_variable handed_;
  std::deque<Waiter> waiters_;
  bool locked_ = false;
};

}  // namespace crl::server
