#include "server/http_request.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <vector>

namespace crl::server {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

// A header value for an error message: printable ASCII only (the message must be valid UTF-8, and a client's
// bytes are not), at most 80 bytes.
std::string printable(beast::string_view value) {
  std::string out;
  for (const char c : value.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (value.size() > 80) out += "...";
  return out;
}

std::string hex_byte(unsigned char c) {
  static constexpr char kDigits[] = "0123456789abcdef";
  return std::string("0x") + kDigits[c >> 4] + kDigits[c & 15];
}

bool all_digits(beast::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

HttpRefusal framing(std::string message) {
  return {400, "bad_framing", std::move(message)};
}

}  // namespace

HeadScanner::State HeadScanner::refuse(int status, std::string code, std::string message) {
  refusal_ = {status, std::move(code), std::move(message)};
  return State::kRefused;
}

HeadScanner::State HeadScanner::scan(std::string_view b) {
  while (pos_ < b.size()) {
    if (pos_ >= kHeaderLimit) {
      return refuse(
          431, "headers_too_large",
          "the request line and headers are over the limit of " + std::to_string(kHeaderLimit) + " bytes");
    }
    const auto c = static_cast<unsigned char>(b[pos_]);
    if (c == '\r') {
      if (pos_ + 1 >= b.size()) return State::kNeedMore;  // the LF may come with the next read
      if (b[pos_ + 1] != '\n') {
        return refuse(400, "bad_http", "a bare CR at byte " + std::to_string(pos_) + " (lines end in CRLF)");
      }
      const bool empty_line = pos_ == line_start_;
      pos_ += 2;
      if (!started_) {  // an empty line before the request line: skipped
        begin_ = line_start_ = pos_;
        continue;
      }
      if (empty_line) {
        end_ = pos_;
        return State::kComplete;
      }
      in_first_line_ = false;
      line_start_ = pos_;
      continue;
    }
    if (c == '\n') {
      return refuse(400, "bad_http", "a bare LF at byte " + std::to_string(pos_) + " (lines end in CRLF)");
    }
    started_ = true;
    if (pos_ == line_start_ && !in_first_line_ && (c == ' ' || c == '\t')) {
      return refuse(400, "bad_http",
                    "a field line starts with whitespace at byte " + std::to_string(pos_) +
                        ": obsolete line folding (obs-fold, RFC 9112 section 5.2) is not accepted");
    }
    if (c == 0x7f || (c < 0x20 && !(c == '\t' && !in_first_line_))) {
      return refuse(400, "bad_http",
                    "control byte " + hex_byte(c) + " at byte " + std::to_string(pos_) + " in the " +
                        (in_first_line_ ? "request line" : "header fields"));
    }
    ++pos_;
  }
  return State::kNeedMore;
}

void configure_parser(RequestParser& parser, uint64_t max_body_bytes) {
  parser.body_limit(max_body_bytes);
  // The scanner enforces kHeaderLimit on the raw bytes first; Beast's own limit (on the head and on chunk
  // headers and trailers) is a little larger so that the scanner's clearer message wins.
  parser.header_limit(static_cast<uint32_t>(kHeaderLimit + 1024));
  parser.eager(false);
}

std::optional<HttpRefusal> check_framing(const RequestParser& parser) {
  const auto& head = parser.get();
  size_t hosts = 0, lengths = 0, encodings = 0;
  std::vector<beast::string_view> codings;
  std::string encoding_text;
  for (const auto& f : head) {
    switch (f.name()) {
      case http::field::host:
        ++hosts;
        break;
      case http::field::content_length:
        ++lengths;
        break;
      case http::field::transfer_encoding: {
        ++encodings;
        encoding_text += (encoding_text.empty() ? "" : ", ") + std::string(f.value());
        beast::string_view rest = f.value();
        while (true) {  // a comma-separated list; empty elements and whitespace around them are allowed
          const size_t comma = rest.find(',');
          beast::string_view item = rest.substr(0, comma);
          while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
          while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
          if (!item.empty()) codings.push_back(item);
          if (comma == beast::string_view::npos) break;
          rest.remove_prefix(comma + 1);
        }
        break;
      }
      default:
        break;
    }
  }
  if (head.version() >= 11 && hosts != 1) {
    return HttpRefusal{400, "bad_http",
                       "an HTTP/1.1 request needs exactly one Host field (RFC 9112 section 3.2), not " +
                           std::to_string(hosts)};
  }
  if (encodings > 0) {
    if (lengths > 0) {
      return framing(
          "Transfer-Encoding together with Content-Length (RFC 9112 section 6.3): the body's length is "
          "ambiguous; send one of them");
    }
    if (head.version() < 11) {
      return framing("Transfer-Encoding in an HTTP/1.0 request (RFC 9112 section 6.1)");
    }
    if (encodings > 1) {  // (an empty field before a `chunked` one is the classic smuggling disguise)
      return framing(
          std::to_string(encodings) +
          " Transfer-Encoding fields (RFC 9112 section 6.1): a proxy may read only one of them; send one");
    }
    if (codings.empty()) return framing("an empty Transfer-Encoding");
    if (codings.size() != 1 || !beast::iequals(codings.front(), "chunked")) {
      return HttpRefusal{501, "unsupported_transfer_coding",
                         "Transfer-Encoding \"" + printable(encoding_text) +
                             "\": the only transfer coding this server accepts is a single \"chunked\""};
    }
    if (!parser.chunked()) return framing("Transfer-Encoding \"chunked\" was not understood as chunked");
    return std::nullopt;
  }
  if (parser.chunked()) return framing("a chunked body without Transfer-Encoding");
  if (lengths > 1) {
    return framing(std::to_string(lengths) + " Content-Length fields (RFC 9112 section 6.3); send one");
  }
  if (lengths == 1) {
    const beast::string_view value = head[http::field::content_length];
    if (!all_digits(value) || !parser.content_length()) {
      return framing("Content-Length \"" + printable(value) + "\" is not a number of bytes");
    }
  }
  return std::nullopt;
}

std::optional<HttpRefusal> refusal_for(beast::error_code ec, uint64_t max_body_bytes) {
  if (ec == http::error::body_limit) {
    return HttpRefusal{413, "payload_too_large",
                       "the body is over the limit of " + std::to_string(max_body_bytes) + " bytes"};
  }
  if (ec == http::error::header_limit) {
    return HttpRefusal{431, "headers_too_large",
                       "the headers are over the limit of " + std::to_string(kHeaderLimit) + " bytes"};
  }
  if (ec == http::error::buffer_overflow) {
    return HttpRefusal{431, "headers_too_large",
                       "a chunk header or the trailer fields are over the limit of " +
                           std::to_string(kReadBufferLimit) + " bytes"};
  }
  if (ec == http::error::partial_message) {
    return HttpRefusal{400, "incomplete_request", "the connection ended inside a request"};
  }
  if (ec == http::error::bad_transfer_encoding || ec == http::error::bad_content_length) {
    return framing("the request's framing is not valid HTTP/1.1: " + ec.message());
  }
  if (ec == http::error::end_of_stream) return std::nullopt;
  if (ec && ec.category() == http::make_error_code(http::error::bad_method).category()) {
    return HttpRefusal{400, "bad_http", "the request is not valid HTTP/1.1: " + ec.message()};
  }
  return std::nullopt;
}

size_t put_buffered(RequestParser& parser, std::string_view bytes, beast::error_code& ec) {
  size_t taken = 0;
  ec = {};
  while (taken < bytes.size() && !parser.is_done()) {
    const size_t used = parser.put(boost::asio::buffer(bytes.data() + taken, bytes.size() - taken), ec);
    taken += used;
    if (ec == http::error::need_more) {  // a chunk's head or the trailers cut short: the rest is not here yet
      ec = {};
      break;
    }
    if (ec || used == 0) break;
  }
  return taken;
}

ParsedRequest parse_request(std::string_view bytes, uint64_t max_body_bytes) {
  ParsedRequest out;
  auto refused = [&](HttpRefusal r) {
    out.outcome = ParsedRequest::Outcome::kRefused;
    out.refusal = std::move(r);
    return out;
  };
  HeadScanner scanner;
  switch (scanner.scan(bytes)) {
    case HeadScanner::State::kNeedMore:
      return out;
    case HeadScanner::State::kRefused:
      return refused(scanner.refusal());
    case HeadScanner::State::kComplete:
      break;
  }
  RequestParser parser;
  configure_parser(parser, max_body_bytes);
  beast::error_code ec;
  const std::string_view head = bytes.substr(scanner.head_begin(), scanner.head_end() - scanner.head_begin());
  const size_t used = parser.put(boost::asio::buffer(head.data(), head.size()), ec);
  if (ec || !parser.is_header_done() || used != head.size()) {
    if (auto r = refusal_for(ec, max_body_bytes)) return refused(*r);
    return refused({400, "bad_http", "the request head is not valid HTTP/1.1"});
  }
  if (auto r = check_framing(parser)) return refused(*r);
  size_t pos = scanner.head_end();
  while (!parser.is_done()) {
    // At most what the server's read buffer holds at once.
    const std::string_view rest = bytes.substr(pos, kReadBufferLimit);
    if (rest.empty()) return out;  // kNeedMore
    const size_t n = parser.put(boost::asio::buffer(rest.data(), rest.size()), ec);
    pos += n;
    if (ec == http::error::need_more) {
      if (n == 0 && rest.size() == kReadBufferLimit) {
        return refused(*refusal_for(http::error::buffer_overflow, max_body_bytes));
      }
      if (n == 0) return out;
      ec = {};
      continue;
    }
    if (ec) {
      if (auto r = refusal_for(ec, max_body_bytes)) return refused(*r);
      return refused({400, "bad_http", "the request body is not valid HTTP/1.1: " + ec.message()});
    }
    if (n == 0) return out;
  }
  const auto& request = parser.get();
  out.outcome = ParsedRequest::Outcome::kRequest;
  out.consumed = pos;
  out.method = std::string(request.method_string());
  out.target = std::string(request.target());
  out.body = request.body();
  out.chunked = parser.chunked();
  if (const auto length = parser.content_length()) out.content_length = *length;
  return out;
}

}  // namespace crl::server
