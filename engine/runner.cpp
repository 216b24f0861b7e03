#include "engine/runner.h"

#include <algorithm>

namespace crl {

Runner::Runner(int threads)
    : threads_(threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency())) {
  for (int t = 1; t < threads_; ++t) workers_.emplace_back([this] { worker_loop(); });
}

Runner::~Runner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void Runner::worker_loop() {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    work();
  }
}

void Runner::work() const {
  while (true) {
    size_t i;
    const std::function<void(size_t)>* job;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (job_ == nullptr || next_ >= count_) return;
      i = next_++;
      job = job_;
    }
    std::exception_ptr failure;
    try {
      (*job)(i);
    } catch (...) {
      failure = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure && i < error_index_) {
      error_index_ = i;
      error_ = failure;
    }
    if (++done_ == count_) finished_.notify_all();
  }
}

void Runner::run(size_t count, const std::function<void(size_t)>& job) const {
  if (count == 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &job;
    count_ = count;
    next_ = 0;
    done_ = 0;
    error_index_ = count;
    error_ = nullptr;
    ++generation_;
  }
  if (!workers_.empty() && count > 1) wake_.notify_all();
  work();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return done_ == count_; });
    job_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace crl
