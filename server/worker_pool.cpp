#include "server/worker_pool.h"

#include <algorithm>
#include <system_error>
#include <utility>

#include "server/thread_name.h"

namespace crl::server {

namespace {
// At least one thread may exist, and the ceiling is never below the floor.
WorkerPool::Options checked(WorkerPool::Options options) {
  options.max_threads = std::max({options.max_threads, options.min_threads, size_t{1}});
  return options;
}
}  // namespace

WorkerPool::WorkerPool(Options options) : options_(checked(options)) {}

WorkerPool::~WorkerPool() {
  join();
}

void WorkerPool::post(std::function<void()> task) {
  std::vector<std::thread> left;
  bool wake_one = false;
  {
    std::unique_lock lock(mutex_);
    if (stopping_) return;  // `task` is destroyed here, after the lock (its captures may take other locks)
    queue_.push_back(std::move(task));
    wake_one = spawn_if_needed();
    left.swap(left_);
  }
  // Notified once the lock is released: a worker woken under it would at once block on the mutex this thread
  // still holds (a futex wait and a wake more per task; strace at load, bench/RESULTS.md eleventh pass).
  if (wake_one) wake_.notify_one();
  for (auto& thread : left) thread.join();
}

bool WorkerPool::spawn_if_needed() {
  // Idle threads still count while a notification is on its way to them, and the tasks they will take are
  // still queued: so a task needs a new thread exactly when the queue outnumbers the idle threads.
  if (idle_ >= queue_.size()) return true;                    // an idle thread takes it: wake one
  if (threads_.size() >= options_.max_threads) return false;  // it waits for the next thread to come free
  try {
    std::thread thread([this] { work(); });  // it runs once this lock is released
    const auto id = thread.get_id();
    threads_.emplace(id, std::move(thread));
    peak_ = std::max(peak_, threads_.size());
  } catch (const std::system_error&) {
    // No thread to be had (resource limits): the task waits for a running thread, or for the next post to
    // try again. A server must not fail a request's read for it.
  }
  return false;
}

void WorkerPool::work() {
  name_this_thread("crl-worker");
  std::unique_lock lock(mutex_);
  while (true) {
    if (stopping_) return;
    if (queue_.empty()) {
      ++idle_;
      const bool woken =
          wake_.wait_for(lock, options_.idle_exit, [&] { return !queue_.empty() || stopping_; });
      --idle_;
      if (!woken && threads_.size() > options_.min_threads) {
        // Leaves: its handle goes to `left_` (joined by the next post(), the next thread to leave, or
        // join()), and it joins those that left before it, so an idle server keeps at most one ended
        // thread's stack.
        std::vector<std::thread> earlier;
        earlier.swap(left_);
        const auto self = threads_.find(std::this_thread::get_id());
        left_.push_back(std::move(self->second));
        threads_.erase(self);
        lock.unlock();
        for (auto& thread : earlier) thread.join();
        return;
      }
      continue;
    }
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // its captures are released outside the lock
    lock.lock();
  }
}

void WorkerPool::stop() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  wake_.notify_all();
  dropped.clear();  // outside the lock
}

void WorkerPool::join() {
  stop();
  std::vector<std::thread> all;
  {
    std::lock_guard lock(mutex_);
    all.swap(left_);
    for (auto& [id, thread] : threads_) all.push_back(std::move(thread));
    threads_.clear();  // every thread returns at its next look at `stopping_`, without touching this map
  }
  for (auto& thread : all) thread.join();
}

WorkerPool::Stats WorkerPool::stats() const {
  std::lock_guard lock(mutex_);
  return Stats{threads_.size(), threads_.size() - idle_, queue_.size(), peak_};
}

}  // namespace crl::server
