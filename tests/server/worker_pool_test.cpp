// The server's worker pool (server/worker_pool.h): tasks that block do not make later tasks wait while the
// pool may grow; past its ceiling they queue in order; threads beyond the floor leave when idle; stop drops
// what has not started. Waits: tests/server/wait_helpers.h (no timing is asserted).
#include "server/worker_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/wait_helpers.h"

namespace crl::server {
namespace {

using namespace std::chrono_literals;

using testing::Barrier;
using testing::eventually;

// Sixty-four tasks that each wait for all the others: they can only finish if all run at once. A fixed pool
// of the floor's two threads would hold 62 of them in its queue.
TEST(WorkerPool, BlockedTasksNeverMakeOthersWaitBelowTheCeiling) {
  WorkerPool pool({.min_threads = 2, .max_threads = 1000});
  Barrier barrier;
  for (int i = 0; i < 64; ++i) pool.post([&] { barrier.enter(); });
  EXPECT_TRUE(barrier.wait_entered(64)) << "only " << barrier.entered() << " of 64 ran at once";
  const WorkerPool::Stats stats = pool.stats();
  EXPECT_EQ(stats.queued, 0u);
  EXPECT_GE(stats.threads, 64u);
  barrier.open();
  pool.join();
}

// A worker is named crl-worker (server/thread_name.h): what `top -H` and perf show, and what the gateway
// bench sums the server's CPU by.
TEST(WorkerPool, WorkersAreNamed) {
  WorkerPool pool({.min_threads = 1, .max_threads = 2});
  std::mutex mutex;
  std::string name;
  std::atomic<bool> done{false};
  pool.post([&] {
    char buffer[16] = {};
    pthread_getname_np(pthread_self(), buffer, sizeof(buffer));
    std::lock_guard lock(mutex);
    name = buffer;
    done = true;
  });
  EXPECT_TRUE(eventually([&] { return done.load(); }));
  std::lock_guard lock(mutex);
  EXPECT_EQ(name, "crl-worker");
  pool.join();
}

// At the ceiling, tasks wait in the queue; they all run once threads come free.
TEST(WorkerPool, PastTheCeilingTasksWaitInTheQueue) {
  WorkerPool pool({.min_threads = 1, .max_threads = 3});
  Barrier barrier;
  for (int i = 0; i < 3; ++i) pool.post([&] { barrier.enter(); });
  ASSERT_TRUE(barrier.wait_entered(3));
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) pool.post([&] { ++ran; });
  EXPECT_EQ(pool.stats().threads, 3u);
  EXPECT_EQ(pool.stats().queued, 10u);
  EXPECT_EQ(ran.load(), 0);
  barrier.open();
  EXPECT_TRUE(eventually([&] { return ran.load() == 10; }));
  EXPECT_EQ(pool.stats().peak_threads, 3u);
  pool.join();
}

// Queued tasks start in the order they were posted (one thread: starts are observable in order).
TEST(WorkerPool, QueuedTasksStartInOrder) {
  WorkerPool pool({.min_threads = 1, .max_threads = 1});
  Barrier barrier;
  pool.post([&] { barrier.enter(); });
  ASSERT_TRUE(barrier.wait_entered(1));
  std::mutex mutex;
  std::vector<int> order;
  for (int i = 0; i < 20; ++i) {
    pool.post([&, i] {
      std::lock_guard lock(mutex);
      order.push_back(i);
    });
  }
  barrier.open();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return order.size() == 20;
  }));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], i);
  pool.join();
}

// One task at a time, each waited for: the idle thread is reused, none is added.
TEST(WorkerPool, SequentialTasksReuseTheIdleThread) {
  WorkerPool pool({.min_threads = 1, .max_threads = 100});
  for (int i = 0; i < 50; ++i) {
    std::atomic<bool> done{false};
    pool.post([&] { done = true; });
    ASSERT_TRUE(eventually([&] { return done.load(); }));
    ASSERT_TRUE(eventually([&] { return pool.stats().busy == 0; }));  // back to waiting
  }
  EXPECT_EQ(pool.stats().peak_threads, 1u);
}

// Threads beyond the floor leave once idle for idle_exit; the floor stays.
TEST(WorkerPool, ThreadsBeyondTheFloorLeaveWhenIdle) {
  WorkerPool pool({.min_threads = 2, .max_threads = 100, .idle_exit = 50ms});
  Barrier barrier;
  for (int i = 0; i < 12; ++i) pool.post([&] { barrier.enter(); });
  ASSERT_TRUE(barrier.wait_entered(12));
  EXPECT_EQ(pool.stats().threads, 12u);
  barrier.open();
  EXPECT_TRUE(eventually([&] { return pool.stats().threads == 2; })) << pool.stats().threads;
  // The pool still runs work afterwards, and grows again when it has to.
  Barrier again;
  for (int i = 0; i < 5; ++i) pool.post([&] { again.enter(); });
  EXPECT_TRUE(again.wait_entered(5));
  again.open();
  pool.join();
}

// Posts from several threads while threads keep leaving (idle_exit 1 ms) and coming back: every task runs
// once, whatever the interleaving (also run under ThreadSanitizer when the pool changes).
TEST(WorkerPool, PostsRaceThreadsThatLeave) {
  WorkerPool pool({.min_threads = 1, .max_threads = 8, .idle_exit = 1ms});
  std::atomic<int> ran{0};
  std::vector<std::thread> posters;
  for (int p = 0; p < 4; ++p) {
    posters.emplace_back([&, p] {
      for (int i = 0; i < 500; ++i) {
        pool.post([&] { ++ran; });
        if ((i + p) % 50 == 0) std::this_thread::sleep_for(2ms);  // let threads go idle and leave
      }
    });
  }
  for (auto& poster : posters) poster.join();
  EXPECT_TRUE(eventually([&] { return ran.load() == 2000; })) << ran.load();
  EXPECT_LE(pool.stats().peak_threads, 8u);
  pool.join();
  EXPECT_EQ(ran.load(), 2000);
}

// stop(): running tasks finish, queued ones are destroyed without running, later posts are dropped.
TEST(WorkerPool, StopDropsWhatHasNotStarted) {
  WorkerPool pool({.min_threads = 1, .max_threads = 1});
  Barrier barrier;
  std::atomic<int> ran{0};
  auto counted = std::make_shared<int>(0);
  pool.post([&] {
    barrier.enter();
    ++ran;
  });
  ASSERT_TRUE(barrier.wait_entered(1));
  for (int i = 0; i < 5; ++i) {
    pool.post([&, counted] { ++ran; });
  }
  EXPECT_EQ(counted.use_count(), 6);  // five queued copies
  pool.stop();
  EXPECT_EQ(counted.use_count(), 1);  // destroyed by stop(), not run
  pool.post([&, counted] { ++ran; });
  EXPECT_EQ(counted.use_count(), 1);
  barrier.open();
  pool.join();
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace crl::server
