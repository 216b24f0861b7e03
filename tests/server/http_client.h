#pragma once
// A blocking keep-alive HTTP/1.1 client on loopback, for the server's integration tests and the load
// benchmark (bench/server_bench.cpp), plus a raw-bytes exchange for malformed and slow clients.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace crl::server::testing {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct Reply {
  int status = 0;
  std::string content_type;
  std::string body;
  std::string retry_after;
  bool keep_alive = false;
};

class HttpClient {
 public:
  explicit HttpClient(uint16_t port) : stream_(ioc_) {
    stream_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
    stream_.socket().set_option(tcp::no_delay(true));
  }
  ~HttpClient() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  Reply call(const std::string& method, const std::string& target, const std::string& body = "",
             const std::string& content_type = "application/json", const std::string& accept = "",
             const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    http::request<http::string_body> request(http::string_to_verb(method), target, 11);
    request.set(http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) request.set(name, value);
    if (!body.empty() || method == "POST") request.set(http::field::content_type, content_type);
    if (!accept.empty()) request.set(http::field::accept, accept);
    request.keep_alive(true);
    request.body() = body;
    request.prepare_payload();
    stream_.expires_after(std::chrono::seconds(30));
    http::write(stream_, request);
    http::response_parser<http::string_body> parser;
    parser.body_limit(1u << 30);
    http::read(stream_, buffer_, parser);
    const auto& response = parser.get();
    Reply reply;
    reply.status = static_cast<int>(response.result_int());
    reply.content_type = std::string(response[http::field::content_type]);
    reply.retry_after = std::string(response[http::field::retry_after]);
    reply.body = response.body();
    reply.keep_alive = response.keep_alive();
    return reply;
  }

 private:
  net::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

// Sends `bytes`, optionally shuts down the write side, and returns everything received until the server
// closes the connection, `wait_s` passes, or what was received contains `until` (when not empty) (plain
// POSIX: Beast's timeouts do not apply to blocking reads).
inline std::string raw_exchange(uint16_t port, const std::string& bytes, bool shutdown_write, double wait_s,
                                const std::string& until = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string received;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return received;
  }
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  if (shutdown_write) ::shutdown(fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  char chunk[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) break;  // closed by the server (or reset)
    received.append(chunk, static_cast<size_t>(n));
    if (!until.empty() && received.find(until) != std::string::npos) break;
  }
  ::close(fd);
  return received;
}

}  // namespace crl::server::testing
