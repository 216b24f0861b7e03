#include "server/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/defer.hpp>
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

FiberWait Fiber::wait(boost::asio::posix::stream_descriptor* descriptor, bool write,
                      boost::asio::steady_timer& timer, std::chrono::steady_clock::time_point deadline) {
  namespace net = boost::asio;
  // Shared by the two handlers: the first settles the outcome, cancels the other and resumes the fiber; the
  // second (cancelled) finds it settled and returns. Both run on this fiber's strand.
  struct State {
    std::shared_ptr<Fiber> fiber;
    FiberWait outcome = FiberWait::kCancelled;
    bool settled = false;
  };
  auto state = std::make_shared<State>();
  state->fiber = shared_from_this();
  if (descriptor != nullptr) {
    descriptor->async_wait(
        write ? net::posix::descriptor_base::wait_write : net::posix::descriptor_base::wait_read,
        net::bind_executor(strand_, [state, &timer](const boost::system::error_code& ec) {
          if (state->settled) return;
          state->settled = true;
          state->outcome = ec ? FiberWait::kCancelled : FiberWait::kReady;
          timer.cancel();
          state->fiber->resume();
        }));
  }
  timer.expires_at(deadline);
  timer.async_wait(net::bind_executor(strand_, [state, descriptor](const boost::system::error_code& ec) {
    if (state->settled) return;
    state->settled = true;
    state->outcome = ec ? FiberWait::kCancelled : FiberWait::kTimeout;
    if (descriptor != nullptr) descriptor->cancel();
    state->fiber->resume();
  }));
  suspend();
  const FiberWait outcome = state->outcome;
  state->fiber.reset();  // no cycle through the handler still pending
  return outcome;
}

}  // namespace crl::server
