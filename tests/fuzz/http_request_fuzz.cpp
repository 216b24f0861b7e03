// libFuzzer target for the HTTP request reader (server/http_request.h): the head scanner, Beast's request
// parser and the RFC 9112 framing checks, exactly as the server runs them on a connection.
//
// Input: one selector byte, then the bytes a client sends on one connection. The requests on it are read one
// after the other (keep-alive pipelining) until one is refused or the bytes run out. Properties: nothing
// crashes; a request taken has one unambiguous framing, found independently in its raw head (exactly one
// Transfer-Encoding field and no Content-Length when chunked; no Transfer-Encoding and at most one
// Content-Length otherwise), a body no longer than the limit and, with a Content-Length, exactly that long;
// a refusal has a 4xx/5xx status, a code and a message; and the head scanner fed the bytes in two reads (the
// selector picks where the first read ends) decides the same as fed them at once.
//
// Built by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined; tests/fuzz/CMakeLists.txt) with
// CRL_LIBFUZZER defined; the server tests compile the same function without it and replay the seed corpus
// (tests/fuzz/corpus/http_request).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http_request.h"

namespace crl::server {

namespace {

constexpr uint64_t kMaxBody = 4096;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// Counts field lines named `name` in a raw head (lines split at CRLF, the name ends at the first colon).
size_t fields_named(std::string_view head, std::string_view name) {
  size_t n = 0;
  size_t line = head.find("\r\n");  // skip the request line
  while (line != std::string_view::npos) {
    head.remove_prefix(line + 2);
    line = head.find("\r\n");
    const std::string_view text = head.substr(0, line);
    const size_t colon = text.find(':');
    if (colon != std::string_view::npos && iequals(text.substr(0, colon), name)) ++n;
  }
  return n;
}

void check_scanner_split(std::string_view bytes, size_t first_read) {
  HeadScanner whole;
  const HeadScanner::State at_once = whole.scan(bytes);
  HeadScanner split;
  HeadScanner::State state = split.scan(bytes.substr(0, std::min(first_read, bytes.size())));
  if (state == HeadScanner::State::kNeedMore) state = split.scan(bytes);
  if (state != at_once) std::abort();
  if (state == HeadScanner::State::kComplete &&
      (split.head_begin() != whole.head_begin() || split.head_end() != whole.head_end())) {
    std::abort();
  }
  if (state == HeadScanner::State::kRefused && split.refusal().code != whole.refusal().code) std::abort();
}

}  // namespace

int fuzz_http_request(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  check_scanner_split(bytes, data[0] * 7u);
  for (int request = 0; request < 8 && !bytes.empty(); ++request) {
    const ParsedRequest parsed = parse_request(bytes, kMaxBody);
    if (parsed.outcome == ParsedRequest::Outcome::kNeedMore) break;
    if (parsed.outcome == ParsedRequest::Outcome::kRefused) {
      const HttpRefusal& r = parsed.refusal;
      if (r.status < 400 || r.status > 599 || r.code.empty() || r.message.empty()) std::abort();
      break;
    }
    if (parsed.consumed == 0 || parsed.consumed > bytes.size()) std::abort();
    // The raw head of this request, as the scanner delimited it.
    HeadScanner scanner;
    if (scanner.scan(bytes) != HeadScanner::State::kComplete) std::abort();
    const std::string_view head =
        bytes.substr(scanner.head_begin(), scanner.head_end() - scanner.head_begin());
    const size_t encodings = fields_named(head, "transfer-encoding");
    const size_t lengths = fields_named(head, "content-length");
    if (parsed.chunked) {
      if (encodings != 1 || lengths != 0 || parsed.content_length) std::abort();
    } else {
      if (encodings != 0 || lengths > 1) std::abort();
      if (parsed.body.size() != parsed.content_length.value_or(0)) std::abort();
    }
    if (parsed.body.size() > kMaxBody) std::abort();
    bytes.remove_prefix(parsed.consumed);
  }
  return 0;
}

}  // namespace crl::server

#ifdef CRL_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return crl::server::fuzz_http_request(data, size);
}
#endif
