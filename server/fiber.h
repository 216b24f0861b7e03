#pragma once
// A gateway call's own stack (Boost.Context), so that an I/O thread runs the call and never blocks in it.
//
// Why: a gateway call waits for the upstream LLM (milliseconds to seconds) in the middle of straight-line
// code (compaction may send a summary request, then the turn's). Run on a thread, the wait blocks the thread:
// a call either held an I/O thread (so at most threads - 1 calls could run that way) or hopped to a worker
// and back, two scheduler wake-ups and four context switches per call (issue 18's profile: the switches and
// their futex, epoll_ctl and epoll_wait calls were half the gateway's CPU at load). On a fiber the code stays
// straight-line: where it would block (Upstream's socket waits, a session's lock held by another call) the
// fiber suspends, the I/O thread goes back to its event loop, and a handler resumes the fiber when the socket
// is ready, the deadline passes, or the lock is handed over.
//
// Rules. A fiber is resumed only by handlers on its own strand, so it runs on one thread at a time (not
// always the same one: code must not keep a thread_local across a wait). A fiber's body must not throw.
// Stacks come from a pool of 8 MiB stacks, a thread's default (address space: only touched pages are memory;
// a guard page below each, so an overflow faults instead of corrupting memory), kept for reuse up to
// kMaxPooledStacks: a call pays no mmap and no page faults once the pool is warm. Why as large as a thread's:
// whatever a call did on a worker thread it must do here, and the deepest render a chat template's limits
// allow (engine/jinja: 100 nested macro calls, each inside 200 levels of expressions) overflowed 2 MiB
// (tests/server/fiber_test.cpp). A fiber whose resuming handler is destroyed without running (its
// io_context destroyed with the fiber suspended) is abandoned, not unwound: its stack is leaked, since
// unwinding would run the call's catch blocks in the middle of a shutdown.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/context/fiber.hpp>
#include <chrono>
#include <functional>
#include <memory>

namespace crl::server {

enum class FiberWait { kReady, kTimeout, kCancelled };

// The deadline of a fiber's waits, kept by whoever waits again and again (an upstream lane: one per lane,
// made on the io_context of the fibers that wait on it). Armed lazily: a wait whose deadline is no earlier
// than the timer's expiry leaves the timer as it is, and a wait that ends on its socket leaves it armed; when
// it fires early (for a wait that has ended since) it re-arms for the wait then under way, or rests. Why:
// cancelling an asio timer posts its completion, one more round of the event loop, and a new earliest expiry
// re-programs the loop's timerfd (a system call); an upstream call paid both for every wait before.
// May be destroyed on any thread (a lane that moves to another loop), not while a wait on it is under way.
class FiberTimer {
 public:
  explicit FiberTimer(const boost::asio::any_io_executor& executor);
  ~FiberTimer();
  FiberTimer(const FiberTimer&) = delete;
  FiberTimer& operator=(const FiberTimer&) = delete;
  // Ends the wait under way, if any, as kCancelled (and cancels its descriptor's wait), from a handler that
  // runs later on the waiting fiber's strand: never inside this call. Thread-safe.
  void cancel();

 private:
  friend class Fiber;
  struct Core;  // shared with the timer's pending completion (fiber.cpp)
  std::shared_ptr<Core> core_;
};

class Fiber : public std::enable_shared_from_this<Fiber> {
 public:
  static constexpr size_t kStackBytes = size_t{8} << 20;
  static constexpr size_t kMaxPooledStacks = 256;

  // Starts `body` on a new fiber whose handlers run on `strand` (a strand executor: handlers of one fiber
  // never run at once). It first runs from a handler deferred to the strand. `body` must not throw.
  static void spawn(boost::asio::any_io_executor strand, std::function<void()> body);
  // The same, from a handler that runs on `strand`: the fiber's first slice runs now, inside that handler
  // (no round through the event loop), until its first wait or its end.
  static void start(boost::asio::any_io_executor strand, std::function<void()> body);
  // The fiber running on this thread; null on a plain thread (then code blocks as before).
  static Fiber* current();

  const boost::asio::any_io_executor& executor() const { return strand_; }
  // From inside the fiber: switches back to the handler that resumed it. Returns once a handler on the
  // strand calls resume(). The caller must have arranged for that first (a pending operation, a waiter list)
  // holding shared_from_this().
  void suspend();
  // From a handler on the strand: runs the fiber until its next suspend() or its end.
  void resume();

  // From inside the fiber: suspends until `descriptor` (null: none, a sleep) is ready to read (write: to
  // write), `deadline` passes (on `timer`), or the wait is cancelled (kCancelled: timer.cancel(), or the
  // descriptor's wait cancelled from a handler on this fiber's strand; how Upstream::cancel() ends a wait).
  // Both must have been created on this fiber's io_context. Costs no thread wake-up: the I/O thread runs
  // other handlers meanwhile, and the one that sees the socket ready resumes the fiber.
  FiberWait wait(boost::asio::posix::stream_descriptor* descriptor, bool write, FiberTimer& timer,
                 std::chrono::steady_clock::time_point deadline);
  // From inside the fiber: reads what `descriptor` has, at most `size` bytes into `data` (`got`: how many;
  // `error`: the read's error, asio's eof at the end of the stream), ending like wait() (kReady once read
  // or failed). One asio read instead of a wait and a recv: asio tries the read at once (a read that
  // returns EAGAIN when nothing is there yet) and otherwise leaves it to the loop as it is registered,
  // where a wait for readiness re-arms the descriptor with epoll_ctl every time (an upstream call paid one).
  FiberWait read(boost::asio::posix::stream_descriptor& descriptor, void* data, size_t size,
                 FiberTimer& timer, std::chrono::steady_clock::time_point deadline, size_t& got,
                 boost::system::error_code& error);

  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  struct Private;  // the constructor's key (fiber.cpp)
  Fiber(Private, boost::asio::any_io_executor strand);

 private:
  static std::shared_ptr<Fiber> make(boost::asio::any_io_executor strand, std::function<void()> body);
  template <class Start>
  FiberWait suspend_until(boost::asio::posix::stream_descriptor* descriptor, FiberTimer& timer,
                          std::chrono::steady_clock::time_point deadline, const Start& start);

  boost::asio::any_io_executor strand_;
  boost::context::fiber context_;  // outside: the fiber while it is suspended; inside: whoever resumed it
  boost::context::fiber caller_;
  // AddressSanitizer's bookkeeping of the two stacks (fiber.cpp); unused otherwise.
  void* fake_stack_ = nullptr;
  const void* caller_bottom_ = nullptr;
  size_t caller_size_ = 0;
  const void* stack_bottom_ = nullptr;
  size_t stack_size_ = 0;
  // ThreadSanitizer's contexts of this fiber and of whoever resumed it (fiber.cpp); null otherwise.
  void* tsan_context_ = nullptr;
  void* tsan_caller_ = nullptr;
};

}  // namespace crl::server
