// The upstream's lanes (upstream.h): keep-alive connections lent to one call at a time, kept per event loop,
// and a call's waits on its lane's socket (poll on a plain thread; on a fiber, the fiber suspends while its
// I/O thread's loop runs), its host lookup, and cancel() at the drain deadline. upstream.cpp holds the
// exchange itself and the call.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "server/fiber.h"
#include "server/gateway/upstream.h"

namespace crl::server::gateway {

namespace asio = boost::asio;

// A lane's socket as the io_context of the fibers that use it sees it: registered once per connection (not
// per wait), with the deadline's timer. `waiting` numbers the wait under way (0: none), so that cancel()'s
// handler, which runs on that fiber's strand later, touches the lane only while that same wait is on.
struct Upstream::FiberIo {
  explicit FiberIo(const asio::any_io_executor& executor)
      : context(&asio::query(executor, asio::execution::context)), descriptor(executor), timer(executor) {}
  const asio::execution_context* context;
  asio::posix::stream_descriptor descriptor;
  int registered = -1;  // the fd the descriptor holds (-1: none)
  // Takes the fd out of the loop (asio must not close it: the lane does).
  void unregister() {
    if (registered >= 0) descriptor.release();
    registered = -1;
  }
  FiberTimer timer;              // armed lazily across the lane's waits (server/fiber.h)
  uint64_t waiting = 0;          // under Upstream::mutex_
  asio::any_io_executor waiter;  // the strand of the fiber whose wait that is (under Upstream::mutex_)
};

Upstream::Lane::~Lane() {
  if (io) io->unregister();  // closed below, not by asio
  if (fd >= 0) ::close(fd);
  if (wake >= 0) ::close(wake);
}

void Upstream::close_fd(Lane& lane, int fd) {
  if (lane.io && lane.io->registered == fd) lane.io->unregister();
  ::close(fd);
}

namespace {
// The event loop a call runs on: its fiber's io_context, or none on a plain thread.
const void* loop_of_caller() {
  const Fiber* fiber = Fiber::current();
  return fiber == nullptr ? nullptr : &asio::query(fiber->executor(), asio::execution::context);
}
}  // namespace

std::unique_ptr<Upstream::Lane> Upstream::acquire() {
  {
    // A lane last used on this call's event loop: its socket is registered there already (moving a lane to
    // another loop costs two epoll_ctl calls).
    std::lock_guard lock(mutex_);
    std::vector<std::unique_ptr<Lane>>& free = free_[loop_of_caller()];
    if (!free.empty()) {
      std::unique_ptr<Lane> lane = std::move(free.back());
      free.pop_back();
      return lane;
    }
    for (auto& [loop, others] : free_) {
      if (others.empty()) continue;
      std::unique_ptr<Lane> lane = std::move(others.back());
      others.pop_back();
      return lane;
    }
  }
  auto lane = std::make_unique<Lane>();
  lane->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (lane->wake < 0) throw Error("gateway", "", std::string("eventfd failed: ") + std::strerror(errno));
  std::lock_guard lock(mutex_);
  lanes_.push_back(lane.get());
  if (cancelled_) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(lane->wake, &one, sizeof one);
  }
  return lane;
}

void Upstream::release(std::unique_ptr<Lane> lane) {
  const void* loop = lane->io ? lane->io->context : nullptr;
  std::lock_guard lock(mutex_);
  free_[loop].push_back(std::move(lane));
}

void Upstream::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
  // The eventfd stays readable (nobody reads it): every wait of every lane, now and later, ends at once.
  for (Lane* lane : lanes_) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(lane->wake, &one, sizeof one);
    // A fiber waiting on the lane: its descriptor and timer are cancelled on its strand (asio objects are
    // not for two threads at once), if that wait is still the lane's by then. Later waits see cancelled_.
    if (lane->io && lane->io->waiting != 0) {
      FiberIo* io = lane->io.get();
      asio::post(io->waiter, [this, io, wait = io->waiting] {
        std::lock_guard relock(mutex_);
        if (io->waiting != wait) return;
        boost::system::error_code ignored;
        io->descriptor.cancel(ignored);
        io->timer.cancel();
      });
    }
  }
}

void Upstream::leave_io_context() {
  std::lock_guard lock(mutex_);
  for (Lane* lane : lanes_) {
    if (!lane->io) continue;
    lane->io->unregister();
    lane->io.reset();
  }
  std::vector<std::unique_ptr<Lane>> all;
  for (auto& [loop, free] : free_) {
    for (auto& lane : free) all.push_back(std::move(lane));
  }
  free_.clear();
  free_[nullptr] = std::move(all);
}

namespace {

using Wait = Upstream::Wait;

// Waits for `events` on `fd` (none when fd < 0: a backoff) until `deadline`, or until the lane's wake fd is
// readable (cancelled).
Wait wait_for(int fd, short events, int wake, Upstream::Clock::time_point deadline) {
  while (true) {
    pollfd fds[2] = {{wake, POLLIN, 0}, {fd, events, 0}};
    const nfds_t count = fd >= 0 ? 2 : 1;
    const auto left = deadline - Upstream::Clock::now();
    const int timeout =
        left <= Upstream::Clock::duration::zero()
            ? 0
            : static_cast<int>(std::min<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(left).count(),
                                                 int64_t{1} << 30));
    const int n = ::poll(fds, count, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Wait::kReady;  // the socket call that follows reports the error
    }
    if (fds[0].revents != 0) return Wait::kCancelled;
    if (count == 2 && fds[1].revents != 0) return Wait::kReady;
    if (Upstream::Clock::now() >= deadline) return Wait::kTimeout;
  }
}

std::string errno_text(int error) {
  return std::strerror(error);
}

}  // namespace

Upstream::FiberIo& Upstream::fiber_io(Lane& lane, const Fiber& fiber) {
  const asio::any_io_executor& executor = fiber.executor();
  if (!lane.io || lane.io->context != &asio::query(executor, asio::execution::context)) {
    // Swapped under the lock: cancel() reads every lane's io, this one's included.
    auto fresh = std::make_unique<FiberIo>(executor);
    std::unique_ptr<FiberIo> old;
    {
      std::lock_guard lock(mutex_);
      old = std::move(lane.io);
      lane.io = std::move(fresh);
    }
    if (old) old->unregister();
  }
  return *lane.io;
}

Upstream::FiberIo* Upstream::enter_wait(Lane& lane, const Fiber& fiber, int fd, Wait& early) {
  FiberIo& io = fiber_io(lane, fiber);
  if (fd >= 0 && io.registered != fd) {
    io.unregister();
    boost::system::error_code ec;
    io.descriptor.assign(fd, ec);
    if (ec) {
      early = Wait::kReady;  // the socket call that follows reports the error
      return nullptr;
    }
    io.registered = fd;
  }
  std::lock_guard lock(mutex_);
  if (cancelled_) {
    early = Wait::kCancelled;
    return nullptr;
  }
  io.waiting = ++waits_;
  io.waiter = fiber.executor();
  return &io;
}

std::optional<Upstream::Wait> Upstream::leave_wait(FiberIo& io, FiberWait waited) {
  std::lock_guard lock(mutex_);
  io.waiting = 0;
  if (cancelled_) return Wait::kCancelled;
  switch (waited) {
    case FiberWait::kReady:
      return Wait::kReady;
    case FiberWait::kTimeout:
      return Wait::kTimeout;
    case FiberWait::kCancelled:
      break;
  }
  return std::nullopt;  // cancelled by nobody (cancel() sets cancelled_ first): the descriptor failed
}

Upstream::Wait Upstream::wait(Lane& lane, int fd, short events, Clock::time_point deadline) {
  Fiber* fiber = Fiber::current();
  if (fiber == nullptr) return wait_for(fd, events, lane.wake, deadline);
  Wait early = Wait::kReady;
  FiberIo* io = enter_wait(lane, *fiber, fd, early);
  if (io == nullptr) return early;
  const FiberWait waited =
      fiber->wait(fd >= 0 ? &io->descriptor : nullptr, events == POLLOUT, io->timer, deadline);
  // A descriptor that failed: the socket call that follows says how.
  return leave_wait(*io, waited).value_or(fd >= 0 ? Wait::kReady : Wait::kTimeout);
}

Upstream::Wait Upstream::read(Lane& lane, char* data, size_t size, Clock::time_point deadline, size_t& got,
                              std::string& error) {
  got = 0;
  Fiber* fiber = Fiber::current();
  if (fiber == nullptr) {
    while (true) {
      // The upstream has not answered yet when the first read comes (it is sampling): poll first instead
      // of paying a recv that returns EAGAIN on every call.
      const Wait w = wait_for(lane.fd, POLLIN, lane.wake, deadline);
      if (w != Wait::kReady) return w;
      const ssize_t n = ::recv(lane.fd, data, size, 0);
      if (n >= 0) {
        got = static_cast<size_t>(n);
        return Wait::kReady;
      }
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      error = errno_text(errno);
      return Wait::kReady;
    }
  }
  Wait early = Wait::kReady;
  FiberIo* io = enter_wait(lane, *fiber, lane.fd, early);
  if (io == nullptr) {
    if (early == Wait::kReady) error = "the socket cannot be watched";
    return early;
  }
  boost::system::error_code ec;
  const FiberWait waited = fiber->read(io->descriptor, data, size, io->timer, deadline, got, ec);
  const std::optional<Wait> w = leave_wait(*io, waited);
  if (!w) {
    error = "the read was cancelled";
    return Wait::kReady;
  }
  if (*w == Wait::kReady && ec && ec != asio::error::eof) error = ec.message();
  return *w;
}

std::vector<HostAddress> Upstream::resolve(Lane& lane, Clock::time_point deadline, Wait& waited,
                                           std::string& failure) {
  waited = Wait::kReady;
  std::shared_ptr<const HostLookup::Pending> lookup;
  try {
    lookup = lookup_.start();
  } catch (const Error& e) {
    failure = "cannot resolve " + http_.endpoint.host + ": " + e.what();
    return {};
  }
  if (!lookup->done()) {
    const Wait w = wait(lane, lookup->fd(), POLLIN, deadline);
    // The lookup's eventfd leaves the fiber's loop before the lookup (its owner) may close it.
    if (lane.io && lane.io->registered == lookup->fd()) lane.io->unregister();
    if (!lookup->done()) {
      waited = w == Wait::kCancelled ? Wait::kCancelled : Wait::kTimeout;
      failure = "cannot resolve " + http_.endpoint.host + ": " +
                (waited == Wait::kCancelled ? std::string("cancelled") : std::string("the lookup timed out"));
      return {};
    }
  }
  if (!lookup->error().empty()) {
    failure = "cannot resolve " + http_.endpoint.host + ": " + lookup->error();
    return {};
  }
  return lookup->addresses();
}

}  // namespace crl::server::gateway
