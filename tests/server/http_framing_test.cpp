// Request framing (issue 14 item 2): RFC 9112 section 6 checks against request smuggling, on the parser
// alone (server/http_request.h) and end to end on loopback, where a smuggled request must never run.
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <sstream>
#include <thread>

#include "server/http_request.h"
#include "server/http_server.h"
#include "tests/fuzz/corpus_replay.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"
#include "wire/wire_codec.h"

namespace crl::server {
int fuzz_http_request(const uint8_t* data, size_t size);  // tests/fuzz/http_request_fuzz.cpp

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

using testing::HttpClient;
using testing::raw_exchange;
using testing::Reply;
using testing::TestServer;

const std::string kCreate =
    R"({"env":"memory_chain","task_id":"f1","params":{"length":"4","reset_points":""}})";

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct Case {
  std::string name;
  std::string head_fields;  // between the request line and the empty line
  int status;
  std::string code;
};

// Each bad head, followed by bytes that would be a DELETE if the body were taken as empty.
const std::vector<Case>& smuggling_cases() {
  static const std::vector<Case> cases = {
      {"xchunked", "Transfer-Encoding: xchunked\r\n", 501, "unsupported_transfer_coding"},
      {"chunked then identity", "Transfer-Encoding: chunked, identity\r\n", 501,
       "unsupported_transfer_coding"},
      {"gzip then chunked", "Transfer-Encoding: gzip, chunked\r\n", 501, "unsupported_transfer_coding"},
      {"chunked twice", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400, "bad_framing"},
      {"identity", "Transfer-Encoding: identity\r\n", 501, "unsupported_transfer_coding"},
      {"identity with length", "Transfer-Encoding: identity\r\nContent-Length: 0\r\n", 400, "bad_framing"},
      {"length then chunked", "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n", 400, "bad_framing"},
      {"chunked then length", "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n", 400, "bad_framing"},
      {"two equal lengths", "Content-Length: 0\r\nContent-Length: 0\r\n", 400, "bad_framing"},
      {"length list", "Content-Length: 0, 0\r\n", 400, "bad_framing"},
      {"conflicting lengths", "Content-Length: 0\r\nContent-Length: 5\r\n", 400, "bad_framing"},
      {"signed length", "Content-Length: +0\r\n", 400, "bad_framing"},
      {"empty coding", "Transfer-Encoding: ,\r\n", 400, "bad_framing"},
      // (a fuzz finding, tests/fuzz/corpus/http_request/regression_empty_then_chunked: taken as chunked)
      {"empty field then chunked", "Transfer-Encoding:\r\nTransfer-Encoding: chunked\r\n", 400,
       "bad_framing"},
      {"chunked then empty field", "Transfer-Encoding: chunked\r\nTransfer-Encoding: \r\n", 400,
       "bad_framing"},
      {"folded coding", "Transfer-Encoding:\r\n chunked\r\n", 400, "bad_http"},
      {"folded field", "X-Note: a\r\n\tb\r\n", 400, "bad_http"},
      {"NUL in a value", std::string("X-Note: a\0b\r\n", 13), 400, "bad_http"},
      {"bare LF", "X-Note: a\nX-Other: b\r\n", 400, "bad_http"},
      {"bare CR", "X-Note: a\rb\r\n", 400, "bad_http"},
      {"space before colon", "Transfer-Encoding : chunked\r\n", 400, "bad_http"},
  };
  return cases;
}

TEST(HttpFraming, ParserRefusesAmbiguousFraming) {
  for (const Case& c : smuggling_cases()) {
    const std::string bytes = "POST /v1/episodes HTTP/1.1\r\nHost: x\r\n" + c.head_fields +
                              "\r\nDELETE /v1/episodes/e HTTP/1.1\r\nHost: x\r\n\r\n";
    const ParsedRequest parsed = parse_request(bytes, 1 << 20);
    EXPECT_EQ(parsed.outcome, ParsedRequest::Outcome::kRefused) << c.name;
    EXPECT_EQ(parsed.refusal.status, c.status) << c.name << ": " << parsed.refusal.message;
    EXPECT_EQ(parsed.refusal.code, c.code) << c.name << ": " << parsed.refusal.message;
    EXPECT_FALSE(parsed.refusal.message.empty());
  }
}

TEST(HttpFraming, ParserAcceptsSoundFramingAndFindsTheNextRequest) {
  const std::string chunked =
      "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
      "Chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n";
  const std::string next = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  ParsedRequest p = parse_request(chunked + next, 1 << 20);
  ASSERT_EQ(p.outcome, ParsedRequest::Outcome::kRequest) << p.refusal.message;
  EXPECT_TRUE(p.chunked);
  EXPECT_EQ(p.body, "abcde");
  EXPECT_EQ(p.consumed, chunked.size());
  p = parse_request(std::string_view(chunked + next).substr(p.consumed), 1 << 20);
  ASSERT_EQ(p.outcome, ParsedRequest::Outcome::kRequest);
  EXPECT_EQ(p.target, "/health");
  // Empty lines before the request line are skipped (RFC 9112 section 2.2); a length of digits is fine.
  p = parse_request("\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nxyzGET", 1 << 20);
  ASSERT_EQ(p.outcome, ParsedRequest::Outcome::kRequest) << p.refusal.message;
  EXPECT_EQ(p.body, "xyz");
  EXPECT_EQ(p.content_length, 3u);
  // HTTP/1.0 needs no Host; HTTP/1.1 needs exactly one.
  EXPECT_EQ(parse_request("GET / HTTP/1.0\r\n\r\n", 1 << 20).outcome, ParsedRequest::Outcome::kRequest);
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\n\r\n", 1 << 20).refusal.code, "bad_http");
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 1 << 20).refusal.code, "bad_http");
  EXPECT_EQ(
      parse_request("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 1 << 20).refusal.code,
      "bad_framing");
  // Incomplete input asks for more; a head over the limit is 431; a body over the limit 413.
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nHost: x\r\n", 1 << 20).outcome,
            ParsedRequest::Outcome::kNeedMore);
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nX: " + std::string(kHeaderLimit, 'a'), 1 << 20).refusal.status,
            431);
  EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n", 4).refusal.status, 413);
  EXPECT_EQ(
      parse_request(
          "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n123456789\r\n0\r\n\r\n", 4)
          .refusal.status,
      413);
}

// The body reaches the request whole and unchanged when the parser gets it in pieces of any size, as reads
// off a socket hand it over (server/request_body.h appends each piece): every byte value, a declared length
// and chunked coding, pieces of 1 byte up to more than the read buffer holds.
TEST(HttpFraming, BodiesArriveWholeWhateverThePieces) {
  std::string body;
  for (int i = 0; i < 100000; ++i) body += static_cast<char>((i * 131 + i / 256) % 256);
  std::string chunked_body;
  for (size_t at = 0, size = 1; at < body.size(); at += size, size = size * 3 % 9973 + 1) {
    const size_t n = std::min(size, body.size() - at);
    std::ostringstream hex;
    hex << std::hex << n;
    chunked_body += hex.str() + "\r\n" + body.substr(at, n) + "\r\n";
  }
  chunked_body += "0\r\n\r\n";
  const std::string by_length =
      "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const std::string by_chunks =
      "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked_body;
  for (const std::string* request : {&by_length, &by_chunks}) {
    for (const size_t piece : {size_t{1}, size_t{7}, size_t{4096}, size_t{40000}}) {
      if (piece == 1 && request == &by_chunks) continue;  // (a byte at a time through ~30 chunk heads: slow)
      RequestParser parser;
      configure_parser(parser, 1 << 20);
      std::string pending;
      size_t fed = 0;
      while (!parser.is_done()) {
        ASSERT_LT(fed, request->size() + 1) << "the parser wants more than the request holds";
        const size_t n = std::min(piece, request->size() - fed);
        pending.append(*request, fed, n);
        fed += n;
        beast::error_code ec;
        // Like the connection: the parser takes what it can of the bytes buffered so far.
        pending.erase(0, put_buffered(parser, pending, ec));
        ASSERT_FALSE(ec) << ec.message();
      }
      EXPECT_EQ(parser.get().body().size(), body.size()) << "pieces of " << piece;
      EXPECT_TRUE(parser.get().body() == body) << "pieces of " << piece;
    }
  }
}

// End to end: the bytes after a refused head are never run as a request, only one answer comes, and it
// closes the connection.
TEST(HttpFraming, SmuggledRequestsNeverRun) {
  TestServer s;
  HttpClient client(s.server.port());
  proto::StepResponse created;
  const Reply reply = client.call("POST", "/v1/episodes", kCreate);
  ASSERT_EQ(reply.status, 200) << reply.body;
  wire::decode_message(reply.body, wire::WireFormat::kJson, created);
  const std::string id = created.episode_id();
  for (const Case& c : smuggling_cases()) {
    const std::string smuggled = "DELETE /v1/episodes/" + id + " HTTP/1.1\r\nHost: x\r\n\r\n";
    const std::string bytes = "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                              c.head_fields + "\r\n" + smuggled;
    const std::string answer = raw_exchange(s.server.port(), bytes, false, 30.0);
    EXPECT_EQ(answer.rfind("HTTP/1.1 " + std::to_string(c.status), 0), 0u) << c.name << ": " << answer;
    EXPECT_NE(answer.find("\"" + c.code + "\""), std::string::npos) << c.name << ": " << answer;
    EXPECT_EQ(count(answer, "HTTP/1.1 "), 1u) << c.name << ": " << answer;
    EXPECT_NE(answer.find("Connection: close"), std::string::npos) << c.name << ": " << answer;
    ASSERT_EQ(client.call("GET", "/v1/episodes/" + id).status, 200) << c.name << ": the DELETE ran";
  }
  // A sound chunked request works, and its connection stays open for the next one.
  const std::string chunked =
      "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n" +
      [] {
        std::ostringstream hex;
        hex << std::hex << kCreate.size();
        return hex.str();
      }() +
      "\r\n" + kCreate + "\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string both = raw_exchange(s.server.port(), chunked, true, 30.0);
  EXPECT_EQ(both.rfind("HTTP/1.1 200", 0), 0u) << both;
  EXPECT_EQ(count(both, "HTTP/1.1 200"), 2u) << both;
  EXPECT_NE(both.find("episode_id"), std::string::npos) << both;
}

// A chunk header or trailer section longer than the read buffer is 431 (a 100 KB trailer field used to throw
// out of Beast's parser and kill the server); the server keeps serving.
TEST(HttpFraming, LongTrailersAndChunkExtensionsAre431) {
  TestServer s;
  const std::string head = "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string trailer = head + "0\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n";
  const std::string extension = head + "1;" + std::string(100000, 'a') + "\r\nx\r\n0\r\n\r\n";
  for (const std::string& bytes : {trailer, extension}) {
    const ParsedRequest parsed = parse_request(bytes, 1 << 20);
    EXPECT_EQ(parsed.refusal.status, 431) << parsed.refusal.message;
    const std::string answer = raw_exchange(s.server.port(), bytes, true, 30.0);
    EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer;
    EXPECT_NE(answer.find("headers_too_large"), std::string::npos) << answer;
  }
  HttpClient client(s.server.port());
  EXPECT_EQ(client.call("GET", "/health").status, 200);
}

TEST(HttpFraming, FuzzSeedCorpusReplays) {
  EXPECT_GE(crl::testing::replay_corpus("http_request", fuzz_http_request), 10u);
}

}  // namespace
}  // namespace crl::server
