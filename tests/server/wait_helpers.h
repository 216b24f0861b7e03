#pragma once
// Waiting in the server's tests without timing assumptions: a barrier that counts the tasks blocked in it
// until the test opens it, and a bounded poll for a state the server reaches on its own. Every wait has a
// generous bound, only as a guard against a hang (a hang fails the test instead of blocking it).
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace crl::server::testing {

class Barrier {
 public:
  // Counts this caller in, then blocks until open() (at most a minute).
  void enter() {
    std::unique_lock lock(mutex_);
    ++entered_;
    changed_.notify_all();
    changed_.wait_for(lock, std::chrono::seconds(60), [&] { return open_; });
  }
  // True once `n` callers have entered (false after a minute: a hang, not a timing assumption).
  bool wait_entered(int n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(60), [&] { return entered_ >= n; });
  }
  int entered() {
    std::lock_guard lock(mutex_);
    return entered_;
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  void reset() {
    std::lock_guard lock(mutex_);
    open_ = false;
    entered_ = 0;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int entered_ = 0;
  bool open_ = false;
};

// Polls `done` every 10 ms for at most a minute; returns its last answer.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 6000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

}  // namespace crl::server::testing
