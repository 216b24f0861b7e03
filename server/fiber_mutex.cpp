#include "server/fiber_mutex.h"

#include <boost/asio/post.hpp>

#include "server/fiber.h"

namespace crl::server {

// A fiber that waits with a heartbeat sleeps on its own timer until the next beat. unlock() hands it the
// lock by setting `granted`, then ends the sleep from a handler on the fiber's strand: that handler runs
// only while the fiber is suspended, so never between the fiber's look at `granted` and its sleep (a
// wake-up lost there would leave the lock unused until the next beat). Shared with that handler, which may
// run after the fiber has gone on (woken by its own timer).
struct FiberMutex::TimedWait {
  explicit TimedWait(const boost::asio::any_io_executor& executor) : timer(executor) {}
  FiberTimer timer;
  bool granted = false;   // under mutex_
  bool sleeping = false;  // on the fiber's strand only
};

void FiberMutex::lock() {
  std::unique_lock lock(mutex_);
  if (!locked_) {
    locked_ = true;
    return;
  }
  if (Fiber* fiber = Fiber::current()) {
    waiters_.push_back(Waiter{fiber->shared_from_this(), nullptr, nullptr});
    lock.unlock();
    // unlock() posts the resumption to this fiber's strand, which runs it only after this handler (the one
    // running the fiber) has returned, i.e. after the suspend: no wake-up is lost.
    fiber->suspend();
    return;
  }
  bool granted = false;
  waiters_.push_back(Waiter{nullptr, &granted, nullptr});
  handed_.wait(lock, [&] { return granted; });
}

void FiberMutex::lock(Heartbeat& heartbeat) {
  using Clock = std::chrono::steady_clock;
  std::unique_lock lock(mutex_);
  if (!locked_) {
    locked_ = true;
    return;
  }
  // (mutex_ is not held across a beat: a beat writes to the client, a fiber's write may suspend.)
  if (Fiber* fiber = Fiber::current()) {
    auto timed = std::make_shared<TimedWait>(fiber->executor());
    waiters_.push_back(Waiter{fiber->shared_from_this(), nullptr, timed});
    while (!timed->granted) {
      lock.unlock();
      const Clock::time_point due = heartbeat.due();
      if (due <= Clock::now()) {
        heartbeat.beat();
      } else {
        timed->sleeping = true;
        fiber->wait(nullptr, false, timed->timer, due);
        timed->sleeping = false;
      }
      lock.lock();
    }
    return;
  }
  bool granted = false;
  waiters_.push_back(Waiter{nullptr, &granted, nullptr});
  while (!granted) {
    const Clock::time_point due = heartbeat.due();
    if (due == Clock::time_point::max()) {
      handed_.wait(lock, [&] { return granted; });
    } else if (!handed_.wait_until(lock, due, [&] { return granted; })) {
      lock.unlock();
      heartbeat.beat();
      lock.lock();
    }
  }
}

bool FiberMutex::try_lock() {
  std::lock_guard lock(mutex_);
  if (locked_) return false;
  locked_ = true;
  return true;
}

void FiberMutex::unlock() {
  std::unique_lock lock(mutex_);
  if (waiters_.empty()) {
    locked_ = false;
    return;
  }
  Waiter next = std::move(waiters_.front());  // the lock goes to it: locked_ stays true
  waiters_.pop_front();
  if (next.timed) {
    next.timed->granted = true;
    lock.unlock();
    const auto executor = next.fiber->executor();
    boost::asio::post(executor, [timed = std::move(next.timed)] {
      if (timed->sleeping) timed->timer.cancel();
    });
    return;
  }
  if (next.fiber) {
    lock.unlock();
    const auto executor = next.fiber->executor();
    boost::asio::post(executor, [fiber = std::move(next.fiber)] { fiber->resume(); });
    return;
  }
  *next.granted = true;
  handed_.notify_all();
}

}  // namespace crl::server
