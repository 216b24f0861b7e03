#pragma once
// Reading one HTTP/1.1 request off the wire, transport-free: the server (server/http_server.cpp), the tests
// and the fuzz target (tests/fuzz/http_request_fuzz.cpp) run the same steps on the same bytes.
//
//   1. HeadScanner finds the end of the head (request line, field lines, empty line) in the bytes received
//      so far and checks its raw bytes: lines end in CRLF (a bare CR or LF is refused), no line folding
//      (obs-fold: a field line that starts with SP or HTAB), no control bytes other than HTAB in a field
//      line, none at all in the request line, at most kHeaderLimit bytes (431 beyond). Empty lines before the
//      request line are skipped (RFC 9112 section 2.2).
//   2. Beast's request parser parses exactly those bytes (the request line and the fields).
//   3. check_framing() applies RFC 9112 section 6 to the parsed head, so that this server and any proxy in
//      front of it agree on where the body ends (no request smuggling):
//        - Transfer-Encoding is accepted only as one field of exactly one coding, `chunked` (several fields,
//          even one empty and one `chunked`, are 400 bad_framing: a proxy may read only one of them); any
//          other coding or list of codings (`gzip, chunked`, `chunked, identity`, `identity`, `xchunked`)
//          is 501 unsupported_transfer_coding;
//        - Transfer-Encoding together with Content-Length, or in an HTTP/1.0 request, is 400 bad_framing;
//        - Content-Length must be one field of digits: several fields (even equal ones) or a list is 400
//          bad_framing;
//        - an HTTP/1.1 request needs exactly one Host field (RFC 9112 section 3.2), else 400 bad_http.
//   4. The body is read by the same parser (Content-Length or chunked, body limit: 413 beyond), from a
//      buffer of at most kReadBufferLimit bytes.
// Every refusal closes the connection after its answer: once the framing is in doubt, no later byte on that
// connection can be trusted to start a request.
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/request_body.h"

namespace crl::server {

using RequestParser = boost::beast::http::request_parser<AppendedStringBody>;

inline constexpr size_t kHeaderLimit = 16 * 1024;
// Unparsed bytes a connection buffers at most (the parser moves body bytes out as they come). A chunk
// header, chunk extension or trailer section longer than this is refused (431): Beast 1.74 bounds none of
// them by its header limit, and a trailer field over 64 KiB throws out of its parser (which killed the
// server before this bound).
inline constexpr size_t kReadBufferLimit = 32 * 1024;

// A request the transport refuses (the answer's status and typed error code); the connection closes after.
struct HttpRefusal {
  int status = 400;
  std::string code;
  std::string message;
};

// Step 1. Feed it the bytes buffered so far (the same prefix, grown by each read); it scans only what is
// new, so a client sending one byte at a time costs linear time.
class HeadScanner {
 public:
  enum class State { kNeedMore, kComplete, kRefused };
  State scan(std::string_view buffered);
  // After kComplete: the head is buffered[head_begin(), head_end()) (head_end() is just past the empty line;
  // the bytes before head_begin() are skipped empty lines).
  size_t head_begin() const { return begin_; }
  size_t head_end() const { return end_; }
  // After kRefused.
  const HttpRefusal& refusal() const { return refusal_; }

 private:
  State refuse(int status, std::string code, std::string message);

  size_t pos_ = 0;         // next byte to look at
  size_t begin_ = 0;       // start of the request line
  size_t line_start_ = 0;  // start of the current line
  bool started_ = false;   // past the empty lines before the request line
  bool in_first_line_ = true;
  size_t end_ = 0;
  HttpRefusal refusal_;
};

// A parser with the server's limits (body limit, header limit, no eager body parsing).
void configure_parser(RequestParser& parser, uint64_t max_body_bytes);

// Step 4 on the bytes buffered so far: the parser takes what it can of `bytes` (up to the request's end);
// returns how many it took. `ec` is the parser's error; running out of bytes is none (is_done() tells).
size_t put_buffered(RequestParser& parser, std::string_view bytes, boost::beast::error_code& ec);

// Step 3 (the parser has the whole head). nullopt: the framing is sound.
std::optional<HttpRefusal> check_framing(const RequestParser& parser);

// The refusal for an error of Beast's parser (steps 2 and 4); nullopt for errors that are not the client's
// HTTP (end of stream, reset, cancellation), after which there is nobody to answer.
std::optional<HttpRefusal> refusal_for(boost::beast::error_code ec, uint64_t max_body_bytes);

// Steps 1-4 on a complete buffer, as the server does on a connection: the fuzz target's and the tests'
// entry point. `consumed` is how many bytes the request took (the next request of a keep-alive connection
// starts there).
struct ParsedRequest {
  enum class Outcome { kRequest, kNeedMore, kRefused } outcome = Outcome::kNeedMore;
  HttpRefusal refusal;  // kRefused
  size_t consumed = 0;  // kRequest
  std::string method, target, body;
  bool chunked = false;
  std::optional<uint64_t> content_length;
};
ParsedRequest parse_request(std::string_view bytes, uint64_t max_body_bytes);

}  // namespace crl::server
