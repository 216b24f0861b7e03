#include "server/fiber_mutex.h"

#include <boost/asio/post.hpp>

#include "server/fiber.h"

namespace crl::server {

void FiberMutex::lock() {
  std::unique_lock lock(mutex_);
  if (!locked_) {
    locked_ = true;
    return;
  }
  if (Fiber* fiber = Fiber::current()) {
    waiters_.push_back(Waiter{fiber->shared_from_this(), nullptr});
    lock.unlock();
    // unlock() posts the resumption to this fiber's strand, which runs it only after this handler (the one
    // running the fiber) has returned, i.e. after the suspend: no wake-up is lost.
    fiber->suspend();
    return;
  }
  bool granted = false;
  waiters_.push_back(Waiter{nullptr, &granted});
  handed_.wait(lock, [&] { return granted; });
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
