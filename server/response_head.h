#pragma once
// The head of a whole (not streamed) answer as text: the status line and the fields, byte for byte as
// Beast's serializer writes them (tests/server/response_head_test.cpp holds the two equal), so that the
// answer leaves as one gather write of head and body. Beast's composed message write cost about 17k
// instructions per answer, a tenth of a gateway call (callgrind, bench/RESULTS.md eleventh pass); the
// streamed answers (chunked) keep Beast's serializer.
#include <boost/beast/http/message.hpp>
#include <string>

namespace crl::server {

// Replaces `out` with "HTTP/1.1 200 OK\r\n" + "Name: value\r\n" per field, in order + "\r\n".
void write_response_head(const boost::beast::http::response_header<>& head, std::string& out);

}  // namespace crl::server
