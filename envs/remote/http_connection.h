#pragma once
// One keep-alive HTTP/1.1 connection to an environment process (Boost.Beast), used synchronously with a
// deadline per exchange. Beast's timeouts apply only to asynchronous operations, so each exchange runs the
// asynchronous write and read on the connection's own io_context until they complete or the deadline closes
// the socket. Not thread-safe: one caller at a time (RemoteEndpoint keeps a pool).
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <string>
#include <string_view>

namespace crl::remote {

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string body;
};

class HttpConnection {
 public:
  // Connects within `timeout`; throws crl::Error (where = `where`) on failure.
  HttpConnection(const std::string& host, int port, std::chrono::milliseconds timeout, std::string where,
                 size_t max_body_bytes);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Sends one request and reads its answer within the timeout. Throws crl::Error naming the request on any
  // transport failure (refused, closed, timed out, not HTTP); the connection is unusable afterwards.
  HttpReply exchange(std::string_view method, const std::string& target, std::string body,
                     std::string_view content_type);
  bool usable() const { return usable_; }
  // The deadline and answer limit of the following exchanges (a pooled connection serves several callers).
  void set_limits(std::chrono::milliseconds timeout, size_t max_body_bytes) {
    timeout_ = timeout;
    max_body_bytes_ = max_body_bytes;
  }

 private:
  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::chrono::milliseconds timeout_;
  std::string where_;
  std::string host_header_;
  size_t max_body_bytes_;
  bool usable_ = false;
};

}  // namespace crl::remote
