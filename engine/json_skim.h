#pragma once
// A quick check that a JSON value is one the reader (engine/json_parser.cpp) accepts, without reading it:
// no node per value, no decoded strings, no numbers converted. The reader uses it for the arrays a caller
// reads nothing of (JsonDocument::parse's `unread_arrays`: an LLM answer's per-token texts, vLLM's
// alternatives when none were asked), which were most of reading such an answer.
//
// The check is conservative: it returns the end of a value only where the reader would accept the same bytes
// at the same depth, and gives up (nullptr) on anything it cannot decide that cheaply: a key with an escape
// (the reader compares decoded keys for duplicates), an object of more than kMaxKeys members, a number whose
// magnitude might overflow a double, an escaped surrogate. The reader then reads the value as usual, so a
// document is accepted or refused, with the same error, as without the check. It recurses, a frame of a few
// hundred bytes per level of nesting, bounded by the reader's depth limit (kMaxJsonDepth for answers).
#include <cstddef>
#include <cstring>
#include <string_view>

#include "engine/json_number_scan.h"

namespace crl::json_skim {

// The length of the strictly well-formed UTF-8 sequence at p (RFC 3629's table; p < stop, *p >= 0x80), or
// 0 with `bad` the offset of the first byte that is not (0: the lead byte).
inline size_t utf8_sequence(const char* p, const char* stop, size_t& bad) {
  const auto byte = [&](size_t i) -> unsigned { return p + i < stop ? static_cast<unsigned char>(p[i]) : 0; };
  const unsigned c = byte(0);
  size_t length = 0;
  unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    length = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    length = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no encoded surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    length = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    bad = 0;
    return 0;
  }
  for (size_t i = 1; i < length; ++i) {
    const unsigned b = byte(i);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) {
      bad = i;
      return 0;
    }
  }
  return length;
}

class Skimmer {
 public:
  static constexpr size_t kMaxKeys = 16;  // the reader's duplicate check, done here for small objects only

  Skimmer(std::string_view text, int max_depth)
      : stop_(text.data() + text.size()), max_depth_(static_cast<size_t>(max_depth < 0 ? 0 : max_depth)) {}

  // The byte after the value at p, whose level (were it an array or object) is `level`; nullptr where the
  // reader might not accept it there.
  const char* value(const char* p, size_t level) const {
    if (p >= stop_) return nullptr;
    switch (*p) {
      case '{':
        return object(p, level);
      case '[':
        return array(p, level);
      case '"':
        return string(p, nullptr);
      case 't':
        return literal(p, "true", 4);
      case 'f':
        return literal(p, "false", 5);
      case 'n':
        return literal(p, "null", 4);
      default:
        return number(p);
    }
  }

 private:
  const char* space(const char* p) const {
    while (p < stop_ && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
    return p;
  }

  const char* literal(const char* p, const char* word, size_t size) const {
    return static_cast<size_t>(stop_ - p) >= size && std::memcmp(p, word, size) == 0 ? p + size : nullptr;
  }

  static bool hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }

  // A string at p (its quote); `escaped` (when given) is set where it holds an escape.
  const char* string(const char* p, bool* escaped) const {
    ++p;
    while (p < stop_) {
      const auto c = static_cast<unsigned char>(*p);
      if (c == '"') return p + 1;
      if (c == '\\') {
        if (escaped != nullptr) *escaped = true;
        if (stop_ - p < 2) return nullptr;
        const char e = p[1];
        if (e == 'u') {
          if (stop_ - p < 6 || !hex(p[2]) || !hex(p[3]) || !hex(p[4]) || !hex(p[5])) return nullptr;
          // \uD800-\uDFFF: a surrogate, valid only in pairs; the reader decides.
          if ((p[2] | 0x20) == 'd' && p[3] >= '8') return nullptr;  // (8, 9 and the letters)
          p += 6;
          continue;
        }
        if (std::strchr("\"\\/bfnrt", e) == nullptr || e == '\0') return nullptr;
        p += 2;
        continue;
      }
      if (c < 0x20) return nullptr;
      if (c < 0x80) {
        ++p;
        continue;
      }
      size_t bad = 0;
      const size_t length = utf8_sequence(p, stop_, bad);
      if (length == 0) return nullptr;
      p += length;
    }
    return nullptr;
  }

  // The grammar's exact form; the value converted (by the reader's own scanner) only where its magnitude
  // might pass a double's range (about 1e308).
  const char* number(const char* p) const {
    const char* const start = p;
    const auto digit = [this](const char* at) {
      return at < stop_ && static_cast<unsigned char>(*at - '0') < 10;
    };
    if (p < stop_ && *p == '-') ++p;
    if (!digit(p)) return nullptr;
    size_t integer_digits = 1;
    if (*p == '0') {
      ++p;
    } else {
      ++p;
      while (digit(p)) {
        ++p;
        ++integer_digits;
      }
    }
    if (p < stop_ && *p == '.') {
      ++p;
      if (!digit(p)) return nullptr;
      // Log-probs are written with 16-17 significant digits: eight at a time, then one at a time.
      while (stop_ - p >= 8 && json_scan::eight_digits(p)) p += 8;
      while (digit(p)) ++p;
    }
    size_t exponent = 0;  // its value where positive (capped)
    if (p < stop_ && (*p == 'e' || *p == 'E')) {
      ++p;
      const bool negative = p < stop_ && *p == '-';
      if (p < stop_ && (*p == '+' || *p == '-')) ++p;
      if (!digit(p)) return nullptr;
      while (digit(p)) {
        if (!negative && exponent < 100000) exponent = exponent * 10 + static_cast<size_t>(*p - '0');
        ++p;
      }
    }
    if (integer_digits + exponent < 300) return p;
    JsonNumber unused;
    const char* error_at = nullptr;
    const char* expected = nullptr;
    return json_scan::scan_number(start, stop_, unused, error_at, expected);
  }

  const char* array(const char* p, size_t level) const {
    if (level > max_depth_) return nullptr;
    p = space(p + 1);
    if (p < stop_ && *p == ']') return p + 1;
    while (true) {
      p = value(p, level + 1);
      if (p == nullptr) return nullptr;
      p = space(p);
      if (p >= stop_) return nullptr;
      if (*p == ']') return p + 1;
      if (*p != ',') return nullptr;
      p = space(p + 1);
    }
  }

  const char* object(const char* p, size_t level) const {
    if (level > max_depth_) return nullptr;
    p = space(p + 1);
    if (p < stop_ && *p == '}') return p + 1;
    // The keys so far (not initialized: an answer's objects have one or two, and zeroing the room for
    // sixteen cost more than checking them).
    const char* key_text[kMaxKeys];
    size_t key_size[kMaxKeys];
    size_t count = 0;
    while (true) {
      if (p >= stop_ || *p != '"' || count == kMaxKeys) return nullptr;
      bool escaped = false;
      const char* const key_end = string(p, &escaped);
      if (key_end == nullptr || escaped) return nullptr;
      const char* const key = p + 1;
      const auto size = static_cast<size_t>(key_end - p - 2);
      for (size_t i = 0; i < count; ++i)  // a duplicate: the reader names it
        if (key_size[i] == size && std::memcmp(key_text[i], key, size) == 0) return nullptr;
      key_text[count] = key;
      key_size[count++] = size;
      p = space(key_end);
      if (p >= stop_ || *p != ':') return nullptr;
      p = value(space(p + 1), level + 1);
      if (p == nullptr) return nullptr;
      p = space(p);
      if (p >= stop_) return nullptr;
      if (*p == '}') return p + 1;
      if (*p != ',') return nullptr;
      p = space(p + 1);
    }
  }

  const char* const stop_;
  const size_t max_depth_;
};

}  // namespace crl::json_skim
