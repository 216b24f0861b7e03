#pragma once
// A persistent thread pool that runs N independent jobs and writes each result into its own slot.
//
// Why results cannot depend on the thread count: job i only reads its own inputs and its own RNG stream
// (keyed by job identity, never by thread), and writes only slot i; the caller combines slots in index
// order. Threads take the next index from an atomic counter, so scheduling affects only when a job runs,
// never what it computes.
//
// The worker threads are started once and sleep between calls, so a training loop that calls run() for
// every small batch pays no thread start-up per batch. The calling thread works too: Runner(1) starts no
// thread at all. run() is not re-entrant and must not be called from two threads at once.
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace crl {

class Runner {
 public:
  // threads <= 0 means one per hardware thread.
  explicit Runner(int threads);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  int threads() const { return threads_; }
  // Calls job(i) for i in [0, count), in parallel. If any job throws, the first exception (lowest index)
  // is rethrown after every job has finished.
  void run(size_t count, const std::function<void(size_t)>& job) const;

 private:
  void work() const;  // takes indices of the current batch until none is left
  void worker_loop();

  int threads_;
  std::vector<std::thread> workers_;
  mutable std::mutex mutex_;
  mutable std::condition_variable wake_, finished_;
  // The current batch (guarded by mutex_, except the counters read through atomics in work()).
  mutable const std::function<void(size_t)>* job_ = nullptr;
  mutable size_t count_ = 0;
  mutable size_t next_ = 0;
  mutable size_t done_ = 0;
  mutable uint64_t generation_ = 0;
  mutable size_t error_index_ = 0;
  mutable std::exception_ptr error_;
  bool stopping_ = false;
};

}  // namespace crl
