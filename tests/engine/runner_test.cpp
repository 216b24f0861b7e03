#include "engine/runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace crl {
namespace {

TEST(Runner, RunsEveryIndexOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> hits(1000);
    Runner(threads).run(hits.size(), [&](size_t i) { hits[i]++; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads;
  }
}

TEST(Runner, RethrowsTheLowestIndexErrorAfterFinishingTheRest) {
  std::atomic<int> done{0};
  try {
    Runner(2).run(100, [&](size_t i) {
      if (i == 70 || i == 30) throw std::runtime_error("job " + std::to_string(i));
      done++;
    });
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "job 30");
  }
  EXPECT_EQ(done.load(), 98);
}

}  // namespace
}  // namespace crl
