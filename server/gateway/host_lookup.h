#pragma once
// The upstream host's addresses, looked up off every caller's thread (issue 18: a DNS server that does not
// answer must hold neither a call past its deadline, nor an I/O thread's other connections, nor the server's
// exit).
//
// getaddrinfo cannot be cut short, so a host name is looked up on a detached thread of its own, and callers
// wait on an eventfd that the lookup makes readable when it ends: a fiber through its I/O thread's event
// loop, a plain thread in poll(2), each until its own deadline or cancel, after which it leaves the lookup
// behind. The thread shares only the lookup's own state, so it may outlive the Upstream and the server
// (asio's resolver, used before, joined its thread when the io_context went away: a stuck lookup held the
// exit). One lookup is in flight at a time (single flight): callers that come while it runs share it, so a
// DNS server that does not answer costs one stuck thread, not one per connection attempt. A finished lookup
// is not reused: each new connection looks the name up again and sees DNS changes, as it did before. A
// numeric address (127.0.0.1, ::1) needs no DNS and is converted at once, with no thread.
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace crl::server::gateway {

struct HostAddress {
  int family = 0;
  sockaddr_storage address{};
  socklen_t length = 0;
};

class HostLookup {
 public:
  // One lookup's outcome. fd() stays open as long as the Pending lives and becomes readable (it is never
  // read) once done() is true; addresses() and error() may be read only then.
  class Pending {
   public:
    Pending();  // throws crl::Error when no eventfd can be made
    ~Pending();
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;
    int fd() const { return fd_; }
    bool done() const { return done_.load(std::memory_order_acquire); }
    const std::vector<HostAddress>& addresses() const { return addresses_; }
    const std::string& error() const { return error_; }  // empty when the name resolved
    // Sets the outcome, then done(), then makes fd() readable (the lookup's thread, once).
    void finish(std::vector<HostAddress> addresses, std::string error);

   private:
    int fd_ = -1;
    std::atomic<bool> done_{false};
    std::vector<HostAddress> addresses_;
    std::string error_;
  };

  // Throws crl::Error when no eventfd can be made (for a numeric host, whose outcome is made here).
  HostLookup(std::string host, uint16_t port);

  // The lookup in flight, or a new one (done already when no thread could be started: then error() says
  // so); for a numeric address, always the same one, done. Thread-safe.
  std::shared_ptr<const Pending> start();

 private:
  const std::string host_;
  const std::string port_text_;
  std::shared_ptr<const Pending> numeric_;  // a numeric host's one outcome, made once (null: a name)
  std::mutex mutex_;
  std::shared_ptr<Pending> in_flight_;  // under mutex_; the last one started
};

}  // namespace crl::server::gateway
