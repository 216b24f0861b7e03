#pragma once
// Protobuf string fields must hold valid UTF-8, but text decoded from byte-level tokens (append_text,
// prompt_text, summaries) and request values echoed in error messages may not be. valid_utf8() replaces each
// ill-formed sequence with U+FFFD so that every answer can be encoded.
#include <string>
#include <string_view>

namespace crl::wire {

inline std::string valid_utf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    const auto c = static_cast<unsigned char>(in[i]);
    size_t length = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      length = 2, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4, min = 0x10000;
    }
    bool ok = length > 0 && i + length <= in.size();
    uint32_t code = ok ? (c & (0xFF >> (length + 1))) : 0;
    for (size_t k = 1; ok && k < length; ++k) {
      const auto next = static_cast<unsigned char>(in[i + k]);
      if ((next & 0xC0) != 0x80) ok = false;
      code = (code << 6) | (next & 0x3F);
    }
    if (ok && (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))) ok = false;
    if (ok) {
      out.append(in.substr(i, length));
      i += length;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    }
  }
  return out;
}

// True when nothing needs replacing (the common case: skip the copy).
inline bool is_valid_utf8(std::string_view in) {
  for (unsigned char c : in) {
    if (c >= 0x80) return valid_utf8(in) == in;
  }
  return true;
}

}  // namespace crl::wire
