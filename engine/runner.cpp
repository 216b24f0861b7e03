#include "engine/runner.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace crl {

Runner::Runner(int threads)
    : threads_(threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency())) {}

void Runner::run(size_t count, const std::function<void(size_t)>& job) const {
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  size_t error_index = count;
  std::exception_ptr error;
  auto worker = [&] {
    while (true) {
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= count) return;
      try {
        job(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (i < error_index) {
          error_index = i;
          error = std::current_exception();
        }
      }
    }
  };
  const size_t workers = std::min<size_t>(threads_, count);
  if (workers <= 1) {
    worker();
  } else {
    std::vector<std::jthread> pool;
    pool.reserve(workers - 1);
    for (size_t t = 1; t < workers; ++t) pool.emplace_back(worker);
    worker();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace crl
