#include "server/response_head.h"

#include <charconv>

namespace crl::server {

void write_response_head(const boost::beast::http::response_header<>& head, std::string& out) {
  out.clear();
  const unsigned version = head.version();
  out += "HTTP/";
  out += static_cast<char>('0' + version / 10 % 10);
  out += '.';
  out += static_cast<char>('0' + version % 10);
  out += ' ';
  char status[8];
  out.append(status, std::to_chars(status, status + sizeof(status), head.result_int()).ptr);
  out += ' ';
  const boost::beast::string_view reason = head.reason();
  out.append(reason.data(), reason.size());
  out += "\r\n";
  for (const auto& field : head) {
    const boost::beast::string_view name = field.name_string(), value = field.value();
    out.append(name.data(), name.size());
    out += ": ";
    out.append(value.data(), value.size());
    out += "\r\n";
  }
  out += "\r\n";
}

}  // namespace crl::server
