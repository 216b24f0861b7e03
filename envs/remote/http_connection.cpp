#include "envs/remote/http_connection.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http.hpp>

#include "engine/error.h"

namespace crl::remote {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Why an exchange failed, in words a user can act on.
std::string describe(const beast::error_code& ec, std::chrono::milliseconds timeout) {
  if (ec == beast::error::timeout) return "no answer within " + std::to_string(timeout.count()) + " ms";
  if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
      ec == net::error::broken_pipe) {
    return "the environment process closed the connection (" + ec.message() + ")";
  }
  return ec.message();
}

}  // namespace

HttpConnection::HttpConnection(const std::string& host, int port, std::chrono::milliseconds timeout,
                               std::string where, size_t max_body_bytes)
    : stream_(ioc_),
      timeout_(timeout),
      where_(std::move(where)),
      host_header_(host + ":" + std::to_string(port)),
      max_body_bytes_(max_body_bytes) {
  beast::error_code ec = net::error::would_block;
  boost::system::error_code parse_ec;
  const auto address = net::ip::make_address(host, parse_ec);
  if (parse_ec) throw Error(where_, "host", "value " + quote(host) + " is not an IP address");
  stream_.expires_after(timeout_);
  stream_.async_connect(tcp::endpoint(address, static_cast<uint16_t>(port)),
                        [&](beast::error_code e) { ec = e; });
  ioc_.run();
  if (ec) throw Error(where_, "", "cannot connect: " + describe(ec, timeout_));
  beast::error_code ignored;  // Nagle only adds latency to small requests; not fatal if refused
  stream_.socket().set_option(tcp::no_delay(true), ignored);
  usable_ = true;
}

HttpConnection::~HttpConnection() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

HttpReply HttpConnection::exchange(std::string_view method, const std::string& target, std::string body,
                                   std::string_view content_type) {
  const std::string where = where_ + " " + std::string(method) + " " + target;
  if (!usable_) throw Error(where, "", "the connection failed earlier");
  usable_ = false;  // until the exchange completes
  http::request<http::string_body> request(http::string_to_verb({method.data(), method.size()}), target, 11);
  request.set(http::field::host, host_header_);
  request.set(http::field::user_agent, "crl-remote-env");
  if (!body.empty() || method == "POST") {
    request.set(http::field::content_type, std::string(content_type));
    request.set(http::field::accept, std::string(content_type));
  }
  request.keep_alive(true);
  request.body() = std::move(body);
  request.prepare_payload();

  // Write and read under one deadline; the timer closes the socket when it fires, which completes the
  // pending operation with beast::error::timeout.
  beast::error_code ec;
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_body_bytes_);
  stream_.expires_after(timeout_);
  http::async_write(stream_, request, [&](beast::error_code e, size_t) {
    ec = e;
    if (!e) http::async_read(stream_, buffer_, parser, [&](beast::error_code e2, size_t) { ec = e2; });
  });
  ioc_.restart();
  ioc_.run();
  if (ec) {
    if (ec == http::error::body_limit) {
      throw Error(where, "", "the answer is longer than " + std::to_string(max_body_bytes_) + " bytes");
    }
    throw Error(where, "", describe(ec, timeout_));
  }
  stream_.expires_never();
  auto& response = parser.get();
  HttpReply reply;
  reply.status = static_cast<int>(response.result_int());
  reply.content_type = std::string(response[http::field::content_type]);
  reply.body = std::move(response.body());
  usable_ = response.keep_alive();
  return reply;
}

}  // namespace crl::remote
