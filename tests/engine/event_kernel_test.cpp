#include "engine/event_kernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "engine/rng.h"
#include "engine/runner.h"

namespace crl {
namespace {

// Records every wake-up as (time, tag).
class Recorder : public Process {
 public:
  void wake(EventKernel& kernel, uint64_t tag) override { log.emplace_back(kernel.now(), tag); }
  std::vector<std::pair<SimTime, uint64_t>> log;
};

TEST(EventKernel, RunsByTimeThenSchedulingOrder) {
  EventKernel kernel;
  Recorder r;
  kernel.schedule_at(5, r, 1);
  kernel.schedule_at(3, r, 2);
  kernel.schedule_at(5, r, 3);
  kernel.schedule_at(3, r, 4);
  kernel.run();
  const std::vector<std::pair<SimTime, uint64_t>> expected = {{3, 2}, {3, 4}, {5, 1}, {5, 3}};
  EXPECT_EQ(r.log, expected);
  EXPECT_EQ(kernel.now(), 5);
  EXPECT_EQ(kernel.processed(), 4u);
}

TEST(EventKernel, CancelRemovesOnceAndStaleIdsAreRejected) {
  EventKernel kernel;
  Recorder r;
  const EventId a = kernel.schedule_at(1, r, 1);
  const EventId b = kernel.schedule_at(2, r, 2);
  EXPECT_TRUE(kernel.cancel(b));
  EXPECT_FALSE(kernel.cancel(b));
  EXPECT_FALSE(kernel.cancel(EventId{}));
  kernel.run();
  EXPECT_FALSE(kernel.cancel(a));  // already ran
  // The slot of `a` is reused; the old id must not cancel the new event.
  kernel.schedule_at(3, r, 3);
  EXPECT_FALSE(kernel.cancel(a));
  kernel.run();
  const std::vector<std::pair<SimTime, uint64_t>> expected = {{1, 1}, {3, 3}};
  EXPECT_EQ(r.log, expected);
}

TEST(EventKernel, RunUntilStopsAndAdvancesTheClock) {
  EventKernel kernel;
  Recorder r;
  kernel.schedule_at(10, r, 1);
  kernel.schedule_at(20, r, 2);
  kernel.run_until(15);
  EXPECT_EQ(r.log.size(), 1u);
  EXPECT_EQ(kernel.now(), 15);
  EXPECT_EQ(kernel.pending(), 1u);
  kernel.schedule_after(1, r, 3);  // at 16, before 20
  kernel.run();
  EXPECT_EQ(r.log.back().second, 2u);
  EXPECT_EQ(r.log[1].first, 16);
}

// A process that re-schedules itself: an episode taking turns of varying length.
class Ticker : public Process {
 public:
  explicit Ticker(int turns) : turns_(turns) {}
  void wake(EventKernel& kernel, uint64_t tag) override {
    times.push_back(kernel.now());
    if (--turns_ > 0) kernel.schedule_after(static_cast<SimTime>(tag + 1), *this, tag + 1);
  }
  std::vector<SimTime> times;

 private:
  int turns_;
};

TEST(EventKernel, ProcessesScheduleThemselves) {
  EventKernel kernel;
  Ticker t(4);
  kernel.schedule_at(0, t, 0);
  kernel.run();
  EXPECT_EQ(t.times, (std::vector<SimTime>{0, 1, 3, 6}));
}

// Random schedules and cancellations against a reference ordering by (time, sequence).
TEST(EventKernel, MatchesASortedReferenceUnderRandomCancellation) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Rng rng(StreamKey{seed, 0, 0, StreamRole::kSimulation, 0});
    EventKernel kernel;
    Recorder r;
    std::vector<std::tuple<SimTime, uint64_t, EventId>> scheduled;
    for (uint64_t i = 0; i < 2000; ++i) {
      const SimTime at = rng.uniform_int(500);
      scheduled.emplace_back(at, i, kernel.schedule_at(at, r, i));
    }
    std::vector<bool> cancelled(scheduled.size(), false);
    for (int c = 0; c < 500; ++c) {
      const uint32_t i = rng.uniform_int(static_cast<uint32_t>(scheduled.size()));
      const bool was_live = !cancelled[i];
      EXPECT_EQ(kernel.cancel(std::get<2>(scheduled[i])), was_live);
      cancelled[i] = true;
    }
    std::vector<std::pair<SimTime, uint64_t>> expected;
    for (size_t i = 0; i < scheduled.size(); ++i) {
      if (!cancelled[i]) expected.emplace_back(std::get<0>(scheduled[i]), std::get<1>(scheduled[i]));
    }
    std::sort(expected.begin(), expected.end());  // (time, tag) where tag = scheduling order
    kernel.run();
    ASSERT_EQ(r.log, expected) << "seed " << seed;
  }
}

// Parallel simulations use one kernel per job; the logs must not depend on the thread count.
TEST(EventKernel, IndependentKernelsGiveTheSameLogsForAnyThreadCount) {
  auto simulate = [](int threads) {
    std::vector<std::vector<std::pair<SimTime, uint64_t>>> logs(16);
    Runner(threads).run(logs.size(), [&](size_t job) {
      Rng rng(StreamKey{job, 0, 0, StreamRole::kSimulation, 0});
      EventKernel kernel;
      Recorder r;
      for (uint64_t i = 0; i < 500; ++i) kernel.schedule_at(rng.uniform_int(100), r, i);
      kernel.run();
      logs[job] = r.log;
    });
    return logs;
  };
  EXPECT_EQ(simulate(1), simulate(2));
}

}  // namespace
}  // namespace crl
