// Fibers (server/fiber.h) and their lock (server/fiber_mutex.h) on a real io_context: a wait ends on the
// socket, the deadline or a cancel; waiting suspends the fiber, not its thread; the lock is handed over in
// arrival order to fibers and plain threads alike, and a waiter with a heartbeat beats while it waits.
#include "server/fiber.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/jinja/template.h"
#include "server/fiber_mutex.h"

namespace crl::server {
namespace {

namespace net = boost::asio;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct SocketPair {
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0); }
  ~SocketPair() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  int fds[2] = {-1, -1};
};

TEST(Fiber, CurrentIsSetOnlyInsideAFiber) {
  net::io_context loop(1);
  EXPECT_EQ(Fiber::current(), nullptr);
  bool inside = false;
  Fiber::spawn(net::make_strand(loop), [&] { inside = Fiber::current() != nullptr; });
  loop.run();
  EXPECT_TRUE(inside);
  EXPECT_EQ(Fiber::current(), nullptr);
}

// A fiber waits for a socket to become readable while the same (only) thread runs other handlers; the
// write that makes it readable comes from one of them.
TEST(Fiber, AWaitOnASocketSuspendsTheFiberNotTheThread) {
  net::io_context loop(1);
  SocketPair pair;
  FiberWait outcome = FiberWait::kTimeout;
  int handlers_while_waiting = 0;
  net::posix::stream_descriptor descriptor(loop);
  descriptor.assign(pair.fds[0]);
  Fiber::spawn(net::make_strand(loop), [&] {
    FiberTimer timer(Fiber::current()->executor());  // gone with the fiber: else it keeps the loop 10 s
    outcome = Fiber::current()->wait(&descriptor, false, timer, Clock::now() + 10s);
  });
  net::steady_timer later(loop);
  later.expires_after(20ms);
  later.async_wait([&](const boost::system::error_code&) {
    ++handlers_while_waiting;
    ASSERT_EQ(::write(pair.fds[1], "x", 1), 1);
  });
  const auto start = Clock::now();
  loop.run();
  descriptor.release();
  EXPECT_EQ(outcome, FiberWait::kReady);
  EXPECT_EQ(handlers_while_waiting, 1);
  EXPECT_LT(Clock::now() - start, 5s);  // (a hang guard, not a timing claim: the deadline is 10 s)
}

// The timer stays armed after a wait that ends on its socket (FiberTimer, server/fiber.h), yet every wait
// ends at its own deadline: a later wait with an earlier deadline re-arms it; a later wait with a later
// deadline, when the timer fires at the earlier one, is neither ended early nor left without a deadline.
TEST(Fiber, ALazyTimerEndsEachWaitAtItsOwnDeadline) {
  net::io_context loop(1);
  SocketPair pair;
  net::posix::stream_descriptor descriptor(loop);
  descriptor.assign(pair.fds[0]);
  FiberWait first = FiberWait::kTimeout, earlier = FiberWait::kReady, second = FiberWait::kTimeout,
            later = FiberWait::kReady;
  Clock::duration earlier_took{}, later_took{};
  Fiber::spawn(net::make_strand(loop), [&] {
    Fiber& self = *Fiber::current();
    FiberTimer timer(self.executor());
    const auto drain = [&] {
      char byte;
      ASSERT_EQ(::read(pair.fds[0], &byte, 1), 1);
    };
    ASSERT_EQ(::write(pair.fds[1], "x", 1), 1);
    first = self.wait(&descriptor, false, timer, Clock::now() + 10s);  // ready at once; the timer stays
    drain();
    auto start = Clock::now();
    earlier = self.wait(&descriptor, false, timer, start + 30ms);  // must not wait for the 10 s
    earlier_took = Clock::now() - start;

    ASSERT_EQ(::write(pair.fds[1], "y", 1), 1);
    second = self.wait(&descriptor, false, timer, Clock::now() + 30ms);  // ready; armed for 30 ms
    drain();
    start = Clock::now();
    later = self.wait(&descriptor, false, timer, start + 300ms);  // the timer fires at 30 ms first
    later_took = Clock::now() - start;
  });
  const auto start = Clock::now();
  loop.run();
  descriptor.release();
  EXPECT_EQ(first, FiberWait::kReady);
  EXPECT_EQ(earlier, FiberWait::kTimeout);
  EXPECT_LT(earlier_took, 5s) << "the earlier deadline did not re-arm the timer";  // (a hang guard)
  EXPECT_EQ(second, FiberWait::kReady);
  EXPECT_EQ(later, FiberWait::kTimeout);
  EXPECT_GE(later_took, 300ms) << "the timer armed for an ended wait ended the next one early";
  EXPECT_LT(Clock::now() - start, 5s);  // (a hang guard: the timer went with the fiber)
}

// Fiber::read: bytes already there, bytes that come while it waits (written by another handler on the
// same thread), its deadline, a cancel, and the end of the stream.
TEST(Fiber, AReadGetsTheBytesTheDeadlineACancelOrTheEnd) {
  net::io_context loop(1);
  SocketPair pair;
  net::posix::stream_descriptor descriptor(loop);
  descriptor.assign(pair.fds[0]);
  std::string already, later;
  FiberWait timed = FiberWait::kReady, cancelled = FiberWait::kReady, ended = FiberWait::kTimeout;
  size_t end_got = 1;
  boost::system::error_code end_error;
  net::steady_timer writer(loop);
  Fiber::spawn(net::make_strand(loop), [&] {
    Fiber& self = *Fiber::current();
    FiberTimer timer(self.executor());
    char buffer[16];
    size_t got = 0;
    boost::system::error_code error;
    ASSERT_EQ(::write(pair.fds[1], "abc", 3), 3);
    EXPECT_EQ(self.read(descriptor, buffer, sizeof buffer, timer, Clock::now() + 10s, got, error),
              FiberWait::kReady);
    EXPECT_FALSE(error);
    already.assign(buffer, got);
    writer.expires_after(10ms);
    writer.async_wait([&](const boost::system::error_code&) { ASSERT_EQ(::write(pair.fds[1], "de", 2), 2); });
    EXPECT_EQ(self.read(descriptor, buffer, sizeof buffer, timer, Clock::now() + 10s, got, error),
              FiberWait::kReady);
    later.assign(buffer, got);
    timed = self.read(descriptor, buffer, sizeof buffer, timer, Clock::now() + 20ms, got, error);
    net::post(self.executor(), [&] { timer.cancel(); });
    cancelled = self.read(descriptor, buffer, sizeof buffer, timer, Clock::now() + 10s, got, error);
    ::shutdown(pair.fds[1], SHUT_WR);
    ended = self.read(descriptor, buffer, sizeof buffer, timer, Clock::now() + 10s, end_got, end_error);
  });
  const auto start = Clock::now();
  loop.run();
  descriptor.release();
  EXPECT_EQ(already, "abc");
  EXPECT_EQ(later, "de");
  EXPECT_EQ(timed, FiberWait::kTimeout);
  EXPECT_EQ(cancelled, FiberWait::kCancelled);
  EXPECT_EQ(ended, FiberWait::kReady);
  EXPECT_EQ(end_got, 0u);
  EXPECT_EQ(end_error, net::error::eof);
  EXPECT_LT(Clock::now() - start, 5s);  // (a hang guard: every deadline above that is met is 20 ms)
}

TEST(Fiber, AWaitEndsAtItsDeadlineOrWhenCancelled) {
  net::io_context loop(1);
  SocketPair pair;
  net::posix::stream_descriptor descriptor(loop);
  descriptor.assign(pair.fds[0]);
  FiberWait timed = FiberWait::kReady, slept = FiberWait::kReady, cancelled = FiberWait::kReady;
  Fiber::spawn(net::make_strand(loop), [&] {
    Fiber& self = *Fiber::current();
    FiberTimer timer(self.executor());  // gone with the fiber: else it keeps the loop 10 s
    timed = self.wait(&descriptor, false, timer, Clock::now() + 20ms);  // nothing to read
    slept = self.wait(nullptr, false, timer, Clock::now() + 5ms);       // a backoff: no socket
    // Cancelled from a handler on the fiber's strand while it waits (as Upstream::cancel() does).
    net::post(self.executor(), [&] {
      descriptor.cancel();
      timer.cancel();
    });
    cancelled = self.wait(&descriptor, false, timer, Clock::now() + 10s);
  });
  loop.run();
  descriptor.release();
  EXPECT_EQ(timed, FiberWait::kTimeout);
  EXPECT_EQ(slept, FiberWait::kTimeout);
  EXPECT_EQ(cancelled, FiberWait::kCancelled);
}

// Fibers and a plain thread queue on one lock held by a fiber that waits (20 ms on a timer) while holding
// it: they get it in arrival order, and the one I/O thread keeps running handlers meanwhile.
// Who got the lock, in order, recorded from any thread.
struct Arrivals {
  void record(const std::string& who) {
    std::lock_guard guard(mutex);
    names.push_back(who);
  }
  std::mutex mutex;
  std::vector<std::string> names;
};

// Runs `loop` with a 1 ms timer ticking on it `count` times (the I/O thread runs on while fibers wait);
// returns how many ticks ran.
int run_ticking(net::io_context& loop, int count) {
  int ticks = 0;
  net::steady_timer tick(loop);
  std::function<void()> again = [&] {
    tick.expires_after(1ms);
    tick.async_wait([&](const boost::system::error_code&) {
      if (++ticks < count) again();
    });
  };
  again();
  loop.run();
  return ticks;
}

TEST(FiberMutex, WaitersGetTheLockInArrivalOrderAndTheThreadRunsOn) {
  net::io_context loop(1);
  FiberMutex lock;
  Arrivals arrivals;
  const auto record = [&](const std::string& who) { arrivals.record(who); };
  std::atomic<int> queued{0};
  FiberTimer hold(loop.get_executor());
  Fiber::spawn(net::make_strand(loop), [&] {
    std::lock_guard guard(lock);
    record("holder");
    while (queued.load() < 3) Fiber::current()->wait(nullptr, false, hold, Clock::now() + 5ms);
  });
  for (const char* name : {"fiber-1", "fiber-2"}) {
    Fiber::spawn(net::make_strand(loop), [&, name] {
      ++queued;
      std::lock_guard guard(lock);
      record(name);
    });
  }
  std::thread plain([&] {
    while (queued.load() < 2) std::this_thread::sleep_for(1ms);
    ++queued;
    std::lock_guard guard(lock);  // blocks this thread only
    record("thread");
  });
  const int ticks = run_ticking(loop, 5);
  plain.join();
  EXPECT_EQ(arrivals.names, (std::vector<std::string>{"holder", "fiber-1", "fiber-2", "thread"}));
  EXPECT_EQ(ticks, 5);
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

// A waiter's heartbeat (a streamed call's keep-alive while it waits for its session's lock).
struct CountingHeartbeat final : Heartbeat {
  explicit CountingHeartbeat(Clock::duration every) : period(every), next(Clock::now() + every) {}
  Clock::time_point due() const override { return next; }
  void beat() override {
    ++beats;
    next = Clock::now() + period;
  }
  Clock::duration period;
  Clock::time_point next;
  std::atomic<int> beats{0};
};

// Waiters with a heartbeat beat while the lock is held and keep their place in the queue: the holder
// keeps it 300 ms, a fiber beating every 20 ms and a thread beating every 20 ms beat about 15 times each;
// a fiber whose next beat is 30 s away still gets the lock as soon as it is handed over (the hand-over
// ends its sleep), and a plain waiter after it as before. The I/O thread runs on meanwhile.
TEST(FiberMutex, WaitersWithAHeartbeatBeatUntilTheLockIsHandedOver) {
  net::io_context loop(1);
  FiberMutex lock;
  Arrivals arrivals;
  const auto record = [&](const std::string& who) { arrivals.record(who); };
  std::atomic<int> queued{0};
  Clock::time_point released{}, slow_got{};
  FiberTimer hold(loop.get_executor());
  Fiber::spawn(net::make_strand(loop), [&] {
    std::lock_guard guard(lock);
    record("holder");
    while (queued.load() < 4) Fiber::current()->wait(nullptr, false, hold, Clock::now() + 5ms);
    Fiber::current()->wait(nullptr, false, hold, Clock::now() + 300ms);
    released = Clock::now();
  });
  CountingHeartbeat fiber_beat(20ms), thread_beat(20ms), slow_beat(30s);
  Fiber::spawn(net::make_strand(loop), [&] {
    ++queued;
    lock.lock(fiber_beat);
    record("fiber-beating");
    lock.unlock();
  });
  std::thread plain([&] {
    while (queued.load() < 1) std::this_thread::sleep_for(1ms);
    ++queued;
    lock.lock(thread_beat);  // blocks this thread only
    record("thread-beating");
    lock.unlock();
  });
  std::thread starter([&] {  // the last two waiters, each once the one before is queued
    while (queued.load() < 2) std::this_thread::sleep_for(1ms);
    net::post(loop, [&] {
      Fiber::spawn(net::make_strand(loop), [&] {
        ++queued;
        lock.lock(slow_beat);
        slow_got = Clock::now();
        record("fiber-slow");
        lock.unlock();
      });
    });
    while (queued.load() < 3) std::this_thread::sleep_for(1ms);
    net::post(loop, [&] {
      Fiber::spawn(net::make_strand(loop), [&] {
        ++queued;
        std::lock_guard guard(lock);
        record("fiber-plain");
      });
    });
  });
  const int ticks = run_ticking(loop, 50);
  plain.join();
  starter.join();
  EXPECT_EQ(arrivals.names, (std::vector<std::string>{"holder", "fiber-beating", "thread-beating",
                                                      "fiber-slow", "fiber-plain"}));
  EXPECT_GE(fiber_beat.beats.load(), 5) << "a beating fiber waiter that did not beat";
  EXPECT_GE(thread_beat.beats.load(), 5) << "a beating thread waiter that did not beat";
  EXPECT_EQ(slow_beat.beats.load(), 0);
  EXPECT_LT(slow_got - released, 10s) << "the lock waited for the waiter's next beat";
  EXPECT_EQ(ticks, 50);
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

// The deepest render a chat template's limits allow (engine/jinja Limits: macro calls nested 99 deep, each
// inside an expression nested as deep as the parser accepts) runs on a fiber as on a thread. With 2 MiB
// stacks it overflowed the fiber's (a segfault) while a thread's 8 MiB held it.
TEST(Fiber, TheDeepestRenderAChatTemplatesLimitsAllowFitsAFibersStack) {
#if defined(__SANITIZE_ADDRESS__) || defined(CRL_TSAN)
  GTEST_SKIP() << "a sanitizer's stack frames are several times larger: this render overflows even the main "
                  "thread's 8 MiB stack in a sanitizer build";
#endif
  std::string expression = "f(n - 1)";
  for (int i = 0; i < 95; ++i) expression = "(" + expression + " ~ 1)";
  const std::string source =
      "{% macro f(n) %}{% if n > 0 %}{{ " + expression + " }}{% endif %}{% endmacro %}{{ f(99) }}";
  const jinja::Template deep = jinja::Template::parse(source, "deep");
  std::string on_thread, on_fiber;
  on_thread = deep.render(jinja::Dict{});
  net::io_context loop(1);
  Fiber::spawn(net::make_strand(loop), [&] { on_fiber = deep.render(jinja::Dict{}); });
  loop.run();
  EXPECT_EQ(on_thread.size(), 99u * 95u);
  EXPECT_EQ(on_fiber, on_thread);
}

}  // namespace
}  // namespace crl::server
