#include "engine/python_escape.h"

#include <cstdint>

#include "engine/unicode_data.h"

namespace crl {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool append_python_escape(std::string_view text, size_t& pos, std::string& out) {
  if (pos >= text.size()) return false;
  const char e = text[pos++];
  const auto hex = [&](int n) {
    uint32_t cp = 0;
    for (int k = 0; k < n; ++k) {
      const int d = pos < text.size() ? hex_digit(text[pos]) : -1;
      if (d < 0) return false;
      cp = cp * 16 + static_cast<uint32_t>(d);
      ++pos;
    }
    unicode::append_utf8(out, static_cast<char32_t>(cp));
    return true;
  };
  switch (e) {
    case 'n':
      out += '\n';
      return true;
    case 't':
      out += '\t';
      return true;
    case 'r':
      out += '\r';
      return true;
    case 'a':
      out += '\a';
      return true;
    case 'b':
      out += '\b';
      return true;
    case 'f':
      out += '\f';
      return true;
    case 'v':
      out += '\v';
      return true;
    case '\\':
      out += '\\';
      return true;
    case '\'':
      out += '\'';
      return true;
    case '"':
      out += '"';
      return true;
    case '\n':
      return true;  // a line continuation
    case 'x':
      return hex(2);
    case 'u':
      return hex(4);
    case 'U':
      return hex(8);
    default:
      break;
  }
  if (e >= '0' && e <= '7') {
    uint32_t cp = static_cast<uint32_t>(e - '0');
    for (int k = 0; k < 2 && pos < text.size() && text[pos] >= '0' && text[pos] <= '7'; ++k)
      cp = cp * 8 + static_cast<uint32_t>(text[pos++] - '0');
    unicode::append_utf8(out, static_cast<char32_t>(cp));
    return true;
  }
  out += '\\';
  out += e;
  return true;
}

}  // namespace crl
