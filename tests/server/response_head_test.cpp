// server/response_head.h: the head of a whole answer written as text is, byte for byte, what Beast's own
// serializer writes for the same message (status lines of every kind, HTTP/1.0 and 1.1, keep-alive either
// way, the fields our answers carry, fields added by name, repeated fields), and end to end an answer read
// by a client that parses it strictly.
#include "server/response_head.h"

#include <gtest/gtest.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace crl::server {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

// The head as Beast's serializer writes it (the header alone, split from the body).
std::string beast_head(http::response<http::string_body>& response) {
  http::response_serializer<http::string_body> serializer(response);
  serializer.split(true);
  std::string out;
  beast::error_code ec;
  while (!serializer.is_header_done()) {
    serializer.next(ec, [&](beast::error_code&, const auto& buffers) {
      for (const auto buffer : beast::buffers_range_ref(buffers))
        out.append(static_cast<const char*>(buffer.data()), buffer.size());
      serializer.consume(beast::buffer_bytes(buffers));
    });
    EXPECT_FALSE(ec) << ec.message();
    if (ec) break;
  }
  return out;
}

TEST(ResponseHead, IsWhatBeastWrites) {
  const unsigned statuses[] = {200, 201, 204, 400, 404, 405, 408, 409,
                               413, 422, 429, 431, 500, 502, 503, 504};
  for (const unsigned status : statuses) {
    for (const unsigned version : {10u, 11u}) {
      for (const bool keep_alive : {false, true}) {
        http::response<http::string_body> response(static_cast<http::status>(status), version);
        response.set(http::field::server, "crl/test");
        response.set(http::field::content_type, "application/json");
        if (status == 429 || status >= 502) response.set(http::field::retry_after, "3");
        response.set("X-Custom-Field", "a value with spaces, commas; and \"quotes\"");
        response.insert("Set-Cookie", "a=1");
        response.insert("Set-Cookie", "b=2");  // repeated: both, in order
        response.keep_alive(keep_alive);
        response.body() = status == 204 ? "" : R"({"ok":true})";
        response.prepare_payload();
        std::string ours;
        write_response_head(response, ours);
        EXPECT_EQ(ours, beast_head(response))
            << status << " HTTP/" << version << " keep-alive " << keep_alive;
      }
    }
  }
  // A status without a standard reason phrase, and a reason set by hand.
  http::response<http::string_body> odd(static_cast<http::status>(299), 11);
  std::string ours;
  write_response_head(odd, ours);
  EXPECT_EQ(ours, beast_head(odd));
  odd.reason("Fine Anyway");
  write_response_head(odd, ours);
  EXPECT_EQ(ours, beast_head(odd));
  EXPECT_EQ(ours.rfind("HTTP/1.1 299 Fine Anyway\r\n", 0), 0u) << ours;
}

// End to end: answers written this way read back whole over keep-alive connections (several answers on
// one connection, an error answer among them), with the status, fields and body intact.
TEST(ResponseHead, AnswersReadBackOverKeepAlive) {
  testing::TestServer server;
  testing::HttpClient client(server.port());
  for (int i = 0; i < 3; ++i) {
    const auto health = client.call("GET", "/health");
    EXPECT_EQ(health.status, 200) << health.body;
    EXPECT_NE(health.body.find("ok"), std::string::npos) << health.body;
    const auto missing = client.call("GET", "/v1/no-such-route");
    EXPECT_EQ(missing.status, 404) << missing.body;
    EXPECT_NE(missing.body.find("not_found"), std::string::npos) << missing.body;
    EXPECT_EQ(missing.content_type, "application/json");
    EXPECT_TRUE(missing.keep_alive);
  }
}

}  // namespace
}  // namespace crl::server
