#include "server/gateway/host_lookup.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <system_error>
#include <thread>

#include "engine/error.h"

namespace crl::server::gateway {

HostLookup::Pending::Pending() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd_ < 0) throw Error("gateway", "", std::string("eventfd failed: ") + std::strerror(errno));
}

HostLookup::Pending::~Pending() {
  ::close(fd_);
}

void HostLookup::Pending::finish(std::vector<HostAddress> addresses, std::string error) {
  addresses_ = std::move(addresses);
  error_ = std::move(error);
  done_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd_, &one, sizeof one);
}

namespace {

HostAddress address_of(const sockaddr* address, size_t length) {
  HostAddress a;
  a.family = address->sa_family;
  a.length = static_cast<socklen_t>(std::min(length, sizeof a.address));
  std::memcpy(&a.address, address, a.length);
  return a;
}

// The address when `host` is a numeric IPv4 or IPv6 address (no DNS: inet_pton, not getaddrinfo, which a
// resolver configuration could still send to a slow service).
std::optional<HostAddress> numeric_address(const std::string& host, uint16_t port) {
  sockaddr_in v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    v4.sin_port = htons(port);
    return address_of(reinterpret_cast<const sockaddr*>(&v4), sizeof v4);
  }
  sockaddr_in6 v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(port);
    return address_of(reinterpret_cast<const sockaddr*>(&v6), sizeof v6);
  }
  return std::nullopt;
}

void look_up(const std::string& host, const std::string& port, HostLookup::Pending& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    out.finish({}, ::gai_strerror(rc));
    return;
  }
  std::vector<HostAddress> addresses;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next)
    addresses.push_back(address_of(a->ai_addr, a->ai_addrlen));
  ::freeaddrinfo(found);
  std::string error = addresses.empty() ? "no address" : "";
  out.finish(std::move(addresses), std::move(error));
}

}  // namespace

HostLookup::HostLookup(std::string host, uint16_t port)
    : host_(std::move(host)), port_text_(std::to_string(port)) {
  if (const std::optional<HostAddress> address = numeric_address(host_, port)) {
    auto done = std::make_shared<Pending>();
    done->finish({*address}, "");
    numeric_ = std::move(done);
  }
}

std::shared_ptr<const HostLookup::Pending> HostLookup::start() {
  if (numeric_) return numeric_;
  std::lock_guard lock(mutex_);
  if (in_flight_ && !in_flight_->done()) return in_flight_;
  auto pending = std::make_shared<Pending>();
  try {
    std::thread([host = host_, port = port_text_, pending] { look_up(host, port, *pending); }).detach();
  } catch (const std::system_error& e) {
    pending->finish({}, std::string("no thread for the lookup: ") + e.what());
    return pending;
  }
  in_flight_ = pending;
  return pending;
}

}  // namespace crl::server::gateway
