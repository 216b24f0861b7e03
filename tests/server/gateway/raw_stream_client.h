#pragma once
// A raw HTTP client for the gateway's streamed answers: what had arrived by a moment and the whole exchange,
// so a test sees which bytes came early (a stream's head, keep-alive comments, the first events).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace crl::server::gateway::testing {

namespace http = boost::beast::http;
using json = nlohmann::json;

// What a raw client saw of one answer: the bytes that had come by `early_s` and the whole exchange after
// (until the server's last chunk, or `wait_s`).
struct Observed {
  std::string early;
  std::string whole;
};

// The answer's status, content type and body (chunks joined), read by Beast's parser; `whole`: whether
// `raw` holds all of it (Content-Length, or the last chunk).
struct Parsed {
  bool whole = false;
  int status = 0;
  std::string content_type, retry_after, body;
};

inline Parsed parse(const std::string& raw) {
  http::response_parser<http::string_body> parser;
  parser.eager(true);
  boost::beast::error_code ec;
  size_t used = 0;
  while (used < raw.size() && !parser.is_done()) {
    const size_t n = parser.put(boost::asio::buffer(raw.data() + used, raw.size() - used), ec);
    if (ec || n == 0) break;
    used += n;
  }
  Parsed out;
  out.whole = parser.is_done();
  if (!parser.is_header_done()) return out;
  out.status = parser.get().result_int();
  out.content_type = std::string(parser.get()[http::field::content_type]);
  out.retry_after = std::string(parser.get()[http::field::retry_after]);
  out.body = parser.get().body();
  return out;
}

inline Observed post_raw(uint16_t port, const std::string& path, const json& body, double early_s,
                         double wait_s, const std::string& version = "HTTP/1.1") {
  const std::string text = body.dump();
  const std::string request = "POST " + path + " " + version +
                              "\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
                              "Content-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
  Observed out;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return out;
  }
  EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  const auto start = std::chrono::steady_clock::now();
  bool early_taken = false;
  char chunk[4096];
  for (;;) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!early_taken && elapsed >= early_s) {
      out.early = out.whole;
      early_taken = true;
    }
    if (elapsed >= wait_s) break;
    const double until = early_taken ? wait_s : early_s;
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>((until - elapsed) * 1000) + 1;
    if (::poll(&p, 1, ms) < 0) break;
    if (!(p.revents & POLLIN)) continue;
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) break;
    out.whole.append(chunk, static_cast<size_t>(n));
    if (parse(out.whole).whole) break;
  }
  if (!early_taken) out.early = out.whole;
  ::close(fd);
  return out;
}

inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace crl::server::gateway::testing
