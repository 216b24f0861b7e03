#include "server/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/defer.hpp>
#include <boost/asio/post.hpp>
#include <boost/context/stack_context.hpp>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "engine/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define CRL_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CRL_FIBER_ASAN 1
#endif
#endif
#ifdef CRL_FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__) || defined(CRL_TSAN)  // (CRL_TSAN: CMakeLists.txt says why)
#define CRL_FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CRL_FIBER_TSAN 1
#endif
#endif
#ifdef CRL_FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace crl::server {

namespace {

thread_local Fiber* t_current = nullptr;

// Stacks of Fiber::kStackBytes with a guard page below, mapped once and reused (a fresh mapping costs two
// system calls and a page fault per touched page on every call).
class StackPool {
 public:
  static StackPool& instance() {
    static StackPool* pool = new StackPool;  // never destroyed: fibers may end during static destruction
    return *pool;
  }
  boost::context::stack_context allocate() {
    void* base = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        base = free_.back();
        free_.pop_back();
      }
    }
    if (base == nullptr) {
      const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      base = ::mmap(nullptr, Fiber::kStackBytes + page, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
      if (base == MAP_FAILED) throw std::bad_alloc();
      if (::mprotect(base, page, PROT_NONE) != 0) {  // the guard page: an overflow faults
        ::munmap(base, Fiber::kStackBytes + page);
        throw std::bad_alloc();
      }
      base = static_cast<char*>(base) + page;
    }
    boost::context::stack_context out;
    out.size = Fiber::kStackBytes;
    out.sp = static_cast<char*>(base) + Fiber::kStackBytes;
    return out;
  }
  void deallocate(boost::context::stack_context& context) {
    void* base = static_cast<char*>(context.sp) - context.size;
    {
      std::lock_guard lock(mutex_);
      if (free_.size() < Fiber::kMaxPooledStacks) {
        free_.push_back(base);
        return;
      }
    }
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    ::munmap(static_cast<char*>(base) - page, context.size + page);
  }

 private:
  std::mutex mutex_;
  std::vector<void*> free_;
};

// The allocator Boost.Context keeps in the fiber's record; tells the fiber its stack's bounds (for
// AddressSanitizer's bookkeeping).
struct PooledStack {
  const void** bottom;
  size_t* size;
  boost::context::stack_context allocate() {
    boost::context::stack_context out = StackPool::instance().allocate();
    *bottom = static_cast<char*>(out.sp) - out.size;
    *size = out.size;
    return out;
  }
  void deallocate(boost::context::stack_context& context) noexcept {
    StackPool::instance().deallocate(context);
  }
};

}  // namespace

struct Fiber::Private {};

// The switch annotations of AddressSanitizer (no-ops without it): a switch announces the stack it goes to,
// the arrival tells where it came from.
struct FiberEntry {
  static void leave(void** fake_stack, const void* bottom, size_t size) {
#ifdef CRL_FIBER_ASAN
    __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
    (void)fake_stack, (void)bottom, (void)size;
#endif
  }
  static void arrive(void* fake_stack, const void** bottom, size_t* size) {
#ifdef CRL_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
#else
    (void)fake_stack, (void)bottom, (void)size;
#endif
  }
  // ThreadSanitizer's: each fiber is a context of its own, and a switch tells it which one runs next (and
  // orders what came before the switch before what comes after). nullptr without it.
  static void* create() {
#ifdef CRL_FIBER_TSAN
    return __tsan_create_fiber(0);
#else
    return nullptr;
#endif
  }
  static void* running() {
#ifdef CRL_FIBER_TSAN
    return __tsan_get_current_fiber();
#else
    return nullptr;
#endif
  }
  static void switch_to(void* context) {
#ifdef CRL_FIBER_TSAN
    __tsan_switch_to_fiber(context, 0);
#else
    (void)context;
#endif
  }
  static void destroy(void* context) {
#ifdef CRL_FIBER_TSAN
    if (context != nullptr) __tsan_destroy_fiber(context);
#else
    (void)context;
#endif
  }
};

Fiber::Fiber(Private, boost::asio::any_io_executor strand) : strand_(std::move(strand)) {}

Fiber::~Fiber() {
  // Suspended and abandoned (its io_context destroyed its resuming handler): leaked, not unwound.
  if (context_) new boost::context::fiber(std::move(context_));
}

Fiber* Fiber::current() {
  return t_current;
}

std::shared_ptr<Fiber> Fiber::make(boost::asio::any_io_executor strand, std::function<void()> body) {
  auto fiber = std::make_shared<Fiber>(Private{}, std::move(strand));
  Fiber& f = *fiber;
  f.tsan_context_ = FiberEntry::create();
  f.context_ = boost::context::fiber(
      std::allocator_arg, PooledStack{&f.stack_bottom_, &f.stack_size_},
      [&f, body = std::move(body)](boost::context::fiber&& caller) mutable {
        FiberEntry::arrive(nullptr, &f.caller_bottom_, &f.caller_size_);
        f.caller_ = std::move(caller);
        body();
        body = nullptr;  // its captures go while the fiber can still run their destructors
        FiberEntry::leave(nullptr, f.caller_bottom_, f.caller_size_);  // this stack is going away
        FiberEntry::switch_to(f.tsan_caller_);
        return std::move(f.caller_);
      });
  return fiber;
}

void Fiber::spawn(boost::asio::any_io_executor strand, std::function<void()> body) {
  std::shared_ptr<Fiber> fiber = make(strand, std::move(body));
  // Deferred: from a handler, it runs on this thread's queue after it (no other thread is woken).
  boost::asio::defer(strand, [fiber = std::move(fiber)] { fiber->resume(); });
}

void Fiber::start(boost::asio::any_io_executor strand, std::function<void()> body) {
  make(std::move(strand), std::move(body))->resume();
}

void Fiber::resume() {
  if (!context_) return;           // ended (its last resume gave back no continuation)
  auto keep = shared_from_this();  // the handler that resumes may hold the last reference
  Fiber* previous = t_current;
  t_current = this;
  void* fake_stack = nullptr;
  FiberEntry::leave(&fake_stack, stack_bottom_, stack_size_);
  tsan_caller_ = FiberEntry::running();
  FiberEntry::switch_to(tsan_context_);
  context_ = std::move(context_).resume();
  FiberEntry::arrive(fake_stack, nullptr, nullptr);
  t_current = previous;
  if (!context_) {  // it ended
    FiberEntry::destroy(tsan_context_);
    tsan_context_ = nullptr;
  }
}

void Fiber::suspend() {
  FiberEntry::leave(&fake_stack_, caller_bottom_, caller_size_);
  FiberEntry::switch_to(tsan_caller_);
  caller_ = std::move(caller_).resume();
  FiberEntry::arrive(fake_stack_, &caller_bottom_, &caller_size_);
}

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

// One Fiber::wait's state. `settled` and `outcome` are touched only on the fiber's strand (the descriptor's
// completion, and the handlers settle_later() posts there); `fiber` is dropped by the wait once it has left
// the timer's Core (under its mutex), so a handler that finds the wait current there may copy it.
struct FiberWaitState {
  std::shared_ptr<Fiber> fiber;
  Clock::time_point deadline;
  boost::asio::posix::stream_descriptor* descriptor = nullptr;
  FiberWait outcome = FiberWait::kCancelled;
  bool settled = false;
};

namespace {
// Ends `wait` as `outcome` from a handler posted to its fiber's strand, unless it has ended by then.
void settle_later(std::shared_ptr<FiberWaitState> wait, std::shared_ptr<Fiber> fiber, FiberWait outcome) {
  const boost::asio::any_io_executor strand = fiber->executor();
  boost::asio::post(strand, [wait = std::move(wait), fiber = std::move(fiber), outcome] {
    if (wait->settled) return;
    wait->settled = true;
    wait->outcome = outcome;
    if (wait->descriptor != nullptr) {
      boost::system::error_code ignored;
      wait->descriptor->cancel(ignored);  // its completion finds the wait settled
    }
    fiber->resume();
  });
}
}  // namespace

// The timer and the wait under way, shared by the FiberTimer and the timer's pending completion (which may
// run after the FiberTimer is gone, and on another thread than the one destroying it: hence the mutex).
struct FiberTimer::Core : std::enable_shared_from_this<Core> {
  explicit Core(const boost::asio::any_io_executor& executor) : timer(executor) {}
  std::mutex mutex;
  boost::asio::steady_timer timer;
  Clock::time_point armed = Clock::time_point::max();  // the pending completion's expiry (max: none)
  uint64_t arming = 0;   // numbers the async_waits: the completion of a replaced one is stale
  bool retired = false;  // the FiberTimer is gone
  std::shared_ptr<FiberWaitState> current;  // the wait under way (null: none)

  // (Under mutex.) Expires at `at`; a completion still pending is cancelled and found stale.
  void arm(Clock::time_point at) {
    armed = at;
    timer.expires_at(at);
    timer.async_wait([core = shared_from_this(), which = ++arming](const boost::system::error_code& ec) {
      core->fired(which, ec);
    });
  }
  void fired(uint64_t which, const boost::system::error_code& ec) {
    std::shared_ptr<FiberWaitState> due;
    std::shared_ptr<Fiber> fiber;
    {
      std::lock_guard lock(mutex);
      if (which != arming || retired) return;  // replaced by a later arm(), or the FiberTimer is gone
      armed = Clock::time_point::max();
      if (ec || !current) return;              // nothing waits: rest until the next wait arms it
      if (Clock::now() < current->deadline) {  // fired for a wait that has ended: re-arm for this one
        arm(current->deadline);
        return;
      }
      due = current;
      fiber = current->fiber;
    }
    settle_later(std::move(due), std::move(fiber), FiberWait::kTimeout);
  }
};

FiberTimer::FiberTimer(const boost::asio::any_io_executor& executor)
    : core_(std::make_shared<Core>(executor)) {}

FiberTimer::~FiberTimer() {
  std::lock_guard lock(core_->mutex);
  core_->retired = true;
  if (core_->armed != Clock::time_point::max()) core_->timer.cancel();  // its completion lets go of the Core
}

void FiberTimer::cancel() {
  std::shared_ptr<FiberWaitState> wait;
  std::shared_ptr<Fiber> fiber;
  {
    std::lock_guard lock(core_->mutex);
    if (!core_->current) return;
    wait = core_->current;
    fiber = wait->fiber;
  }
  settle_later(std::move(wait), std::move(fiber), FiberWait::kCancelled);
}

// wait() and read(): `start(state)` starts the descriptor's operation (none for a sleep), whose completion
// settles the wait through `complete`; the timer ends it at the deadline or on cancel.
template <class Start>
FiberWait Fiber::suspend_until(boost::asio::posix::stream_descriptor* descriptor, FiberTimer& timer,
                               Clock::time_point deadline, const Start& start) {
  auto state = std::make_shared<FiberWaitState>();
  state->fiber = shared_from_this();
  state->deadline = deadline;
  state->descriptor = descriptor;
  FiberTimer::Core& core = *timer.core_;
  {
    std::lock_guard lock(core.mutex);
    core.current = state;
    if (deadline < core.armed) core.arm(deadline);
  }
  start(state);
  suspend();
  {
    std::lock_guard lock(core.mutex);
    if (core.current == state) core.current.reset();
  }
  state->fiber.reset();  // no cycle through a completion still pending
  return state->outcome;
}

namespace {
// The descriptor operation's completion (on the fiber's strand): ends the wait unless the timer has.
void complete(const std::shared_ptr<FiberWaitState>& state, FiberWait outcome) {
  if (state->settled) return;
  state->settled = true;
  state->outcome = outcome;
  state->fiber->resume();
}
}  // namespace

FiberWait Fiber::wait(boost::asio::posix::stream_descriptor* descriptor, bool write, FiberTimer& timer,
                      Clock::time_point deadline) {
  namespace net = boost::asio;
  return suspend_until(descriptor, timer, deadline, [&](const std::shared_ptr<FiberWaitState>& state) {
    if (descriptor == nullptr) return;
    descriptor->async_wait(
        write ? net::posix::descriptor_base::wait_write : net::posix::descriptor_base::wait_read,
        net::bind_executor(strand_, [state](const boost::system::error_code& ec) {
          complete(state, ec ? FiberWait::kCancelled : FiberWait::kReady);
        }));
  });
}

FiberWait Fiber::read(boost::asio::posix::stream_descriptor& descriptor, void* data, size_t size,
                      FiberTimer& timer, Clock::time_point deadline, size_t& got,
                      boost::system::error_code& error) {
  namespace net = boost::asio;
  got = 0;
  error = {};
  return suspend_until(&descriptor, timer, deadline, [&](const std::shared_ptr<FiberWaitState>& state) {
    // `got` and `error` live on this fiber's stack, which outlives the completion only while the wait is
    // under way: written only by the completion that settles it.
    descriptor.async_read_some(
        net::buffer(data, size),
        net::bind_executor(strand_, [state, &got, &error](const boost::system::error_code& ec, size_t n) {
          if (state->settled) return;
          if (ec == net::error::operation_aborted) return complete(state, FiberWait::kCancelled);
          got = n;
          error = ec;
          complete(state, FiberWait::kReady);
        }));
  });
}

}  // namespace crl::server
