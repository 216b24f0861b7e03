#pragma once
// One HTTP exchange on a connected socket, timed as a streaming client sees it: until the first body byte
// (after the head) and until the answer's end, for the benchmarks that compare a streamed answer with the
// same answer whole (bench/lm_serve_bench.cpp, bench/gateway_stream_bench.cpp).
#include <sys/socket.h>

#include <chrono>
#include <string>

namespace crl::bench {

struct TimedExchange {
  bool ok = false;
  std::string error;     // why not
  std::string received;  // the whole answer, head included
  double first_byte_us = 0, total_us = 0;
};

// Sends `request` on `fd` and reads until the received bytes end with `end` (the last chunk of a chunked
// body, or the known last bytes of a whole one).
inline TimedExchange timed_exchange(int fd, const std::string& request, const std::string& end) {
  using Clock = std::chrono::steady_clock;
  TimedExchange out;
  const Clock::time_point start = Clock::now();
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    out.error = "send failed";
    return out;
  }
  bool got_first = false;
  char chunk[16384];
  while (out.received.size() < end.size() ||
         out.received.compare(out.received.size() - end.size(), end.size(), end) != 0) {
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      out.error = "the server closed the connection";
      return out;
    }
    out.received.append(chunk, static_cast<size_t>(n));
    const size_t head_end = out.received.find("\r\n\r\n");
    if (!got_first && head_end != std::string::npos && out.received.size() > head_end + 4) {
      got_first = true;
      out.first_byte_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    }
  }
  out.total_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  out.ok = true;
  return out;
}

}  // namespace crl::bench
