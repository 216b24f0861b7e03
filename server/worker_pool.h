#pragma once
// The threads that run `crl serve`'s routed requests (environment steps, rollouts, gateway calls): a task
// runs on an idle thread, else on a new thread while fewer than `max_threads` exist, else it waits in a
// first-in first-out queue. Threads beyond `min_threads` that stay idle for `idle_exit` leave.
//
// Why it grows: a rollout (POST /v1/rollouts) or a gateway call holds its thread for the LLM's whole answer,
// seconds each, while the thread itself sleeps. A fixed pool capped what a trainer has in flight at the
// upstream at the pool's size: slime posting 256 rollouts at once had 32 of them sampling (the upstream's
// batch size) and the rest queued behind them. Threads that wait cost a stack's touched pages, not CPU;
// requests in flight are bounded anyway by the connections (one request each), so the default ceiling is
// "one thread per request in flight" and the floor keeps the common case free of thread creation.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace crl::server {

class WorkerPool {
 public:
  struct Options {
    size_t min_threads = 1;  // kept even when idle (started on demand, never torn down before stop)
    size_t max_threads = 1;  // >= min_threads; tasks beyond wait in the queue
    std::chrono::milliseconds idle_exit{10'000};
  };
  explicit WorkerPool(Options options);
  ~WorkerPool();  // stop(), then join()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Thread-safe; never blocks on a task. After stop() the task is destroyed without running. Tasks must not
  // throw (an exception escaping one ends the process, as from any thread).
  void post(std::function<void()> task);
  // Tasks queued and not started are destroyed without running; running ones finish. Idempotent.
  void stop();
  // stop(), then waits for the running tasks and every thread to end. Not from one of the pool's tasks.
  void join();

  struct Stats {
    size_t threads = 0;       // alive now
    size_t busy = 0;          // running a task now
    size_t queued = 0;        // waiting for a thread
    size_t peak_threads = 0;  // most threads alive at once so far
  };
  Stats stats() const;

 private:
  void work();
  // Under `mutex_`: a thread for the queue's newest task, unless an idle one will take it. True: an idle
  // one will, and is to be woken once the lock is released.
  bool spawn_if_needed();

  const Options options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  std::map<std::thread::id, std::thread> threads_;
  std::vector<std::thread> left_;  // threads that left while idle, not yet joined
  size_t idle_ = 0;                // threads waiting for a task
  size_t peak_ = 0;
  bool stopping_ = false;
};

}  // namespace crl::server
