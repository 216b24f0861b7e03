#pragma once
// A connection refused at accept time (over --max-connections, server/http_server.h): its answer is written
// at once, before any request is read; then the connection is half-closed and what the client still sends is
// read and dropped until it closes or `linger` passes, so that closing does not reset the connection before
// the client has read the answer.
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <memory>
#include <string>

namespace crl::server {

class ConnectionRefusal : public std::enable_shared_from_this<ConnectionRefusal> {
 public:
  // `response`: the whole HTTP response. `open` counts the refusals alive (the server bounds them).
  ConnectionRefusal(boost::asio::ip::tcp::socket&& socket, std::string response, std::atomic<int>& open,
                    std::chrono::steady_clock::duration linger)
      : stream_(std::move(socket)), response_(std::move(response)), open_(open), linger_(linger) {
    ++open_;
  }
  ~ConnectionRefusal() { --open_; }
  ConnectionRefusal(const ConnectionRefusal&) = delete;
  ConnectionRefusal& operator=(const ConnectionRefusal&) = delete;

  void start() {
    stream_.expires_after(linger_);  // covers the write and every read after it
    boost::asio::async_write(stream_, boost::asio::buffer(response_),
                             [self = shared_from_this()](boost::beast::error_code ec, size_t) {
                               if (ec) return;
                               boost::beast::error_code ignored;
                               self->stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send,
                                                               ignored);
                               self->discard();
                             });
  }

 private:
  void discard() {
    stream_.async_read_some(boost::asio::buffer(sink_),
                            [self = shared_from_this()](boost::beast::error_code ec, size_t) {
                              if (!ec) self->discard();
                            });
  }

  boost::beast::tcp_stream stream_;
  std::string response_;
  std::atomic<int>& open_;
  std::chrono::steady_clock::duration linger_;
  char sink_[4096];
};

}  // namespace crl::server
