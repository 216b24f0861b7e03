#pragma once
// A fixed thread pool that runs N independent jobs and writes each result into its own slot.
//
// Why results cannot depend on the thread count: job i only reads its own inputs and its own RNG stream
// (keyed by job identity, never by thread), and writes only slot i; the caller combines slots in index
// order. Threads take the next index from an atomic counter, so scheduling affects only when a
// job runs, never what it computes.
#include <cstddef>
#include <exception>
#include <functional>

namespace crl {

class Runner {
 public:
  // threads <= 0 means one per hardware thread.
  explicit Runner(int threads);
  int threads() const { return threads_; }
  // Calls job(i) for i in [0, count), in parallel. If any job throws, the first exception (lowest index)
  // is rethrown after every job has finished.
  void run(size_t count, const std::function<void(size_t)>& job) const;

 private:
  int threads_;
};

}  // namespace crl
