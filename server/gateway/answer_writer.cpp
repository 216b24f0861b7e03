#include "server/gateway/answer_writer.h"

#include <charconv>
#include <string_view>

#include "engine/json_escape.h"
#include "wire/utf8.h"

namespace crl::server::gateway {

void put_string(std::string& out, std::string_view s) {
  if (wire::is_valid_utf8(s)) {
    append_json_string(out, s);
  } else {  // nlohmann's replacement of ill-formed sequences, which wire::valid_utf8 shares (wire/utf8.h)
    append_json_string(out, wire::valid_utf8(s));
  }
}

void put_logprob(std::string& out, float value) {
  char buffer[32];
  const char* end = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific).ptr;
  std::string_view text(buffer, static_cast<size_t>(end - buffer));  // [-]d[.ddd]e(+|-)XX
  if (text.front() == '-') {
    out += '-';
    text.remove_prefix(1);
  }
  const size_t e = text.find('e');
  std::string digits(1, text[0]);
  if (e > 1) digits.append(text.substr(2, e - 2));
  int exponent = 0;
  for (const char ch : text.substr(e + 2)) exponent = 10 * exponent + (ch - '0');
  if (text[e + 1] == '-') exponent = -exponent;
  const int n = static_cast<int>(digits.size());
  if (exponent >= 16 || exponent < -4) {  // d[.ddd]e(+|-)XX
    out += digits[0];
    if (n > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += exponent < 0 ? "e-" : "e+";
    const int magnitude = exponent < 0 ? -exponent : exponent;
    if (magnitude < 10) out += '0';
    append_json_int(out, magnitude);
  } else if (exponent < 0) {  // 0.000ddd
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
  } else if (exponent + 1 >= n) {  // ddd000.0
    out += digits;
    out.append(static_cast<size_t>(exponent + 1 - n), '0');
    out += ".0";
  } else {  // dd.ddd
    out.append(digits, 0, static_cast<size_t>(exponent + 1));
    out += '.';
    out.append(digits, static_cast<size_t>(exponent + 1));
  }
}

}  // namespace crl::server::gateway
