#pragma once
// The scanner of a JSON number's text (engine/json_parser.cpp's reader: a node's number, and JsonNumberRows'
// cells): the grammar's exact form, integers kept exactly within 64 bits, doubles correctly rounded
// (decimal_to_double from the digits read while scanning, engine/decimal_double.h; std::from_chars /
// strtod where it declines). Inline: an LLM's answer is mostly numbers, scanned in the reader's loops.
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "engine/decimal_double.h"
#include "engine/json_view.h"

namespace crl::json_scan {

// Whether the 8 bytes at p are all ASCII digits (each byte's high nibble is 3 and adding 6 keeps it 3).
inline bool eight_digits(const char* p) {
  uint64_t x;
  std::memcpy(&x, p, 8);
  constexpr uint64_t kHigh = 0xF0F0F0F0F0F0F0F0ull;
  return ((x & kHigh) | (((x + 0x0606060606060606ull) & kHigh) >> 4)) == 0x3333333333333333ull;
}

// Eight ASCII digits (eight_digits(p) holds) as their value: three multiplications, pairs of digits, then
// pairs of pairs, then the two halves.
inline uint64_t eight_digit_value(const char* p) {
  uint64_t x;
  std::memcpy(&x, p, 8);
  if constexpr (std::endian::native == std::endian::big) x = __builtin_bswap64(x);
  x = ((x & 0x0F0F0F0F0F0F0F0Full) * 2561) >> 8;
  x = ((x & 0x00FF00FF00FF00FFull) * 6553601) >> 16;
  return ((x & 0x0000FFFF0000FFFFull) * 42949672960001ull) >> 32;
}

// The double the text writes (std::from_chars, correctly rounded); nullopt where it overflows. Out of
// line: the rare path (decimal_to_double answers for almost every number).
[[gnu::noinline]] inline std::optional<double> text_to_double(const char* start, const char* end) {
  double d = 0;
  const auto [stopped, error] = std::from_chars(start, end, d);
  if (error != std::errc() || stopped != end) {
    // Out of range: strtod rounds underflow to the nearest denormal or zero, overflow to infinity.
    const std::string copy(start, end);
    d = std::strtod(copy.c_str(), nullptr);
  }
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

// The number whose text starts at p, into `out`; returns the byte after it, or nullptr where the text is
// not a number the parser takes: `error_at` and `expected` say why (expected nullptr: a double's
// overflow, error_at the end of its text). Scanned with a pointer: an LLM's answer is mostly numbers.
[[gnu::always_inline]] inline const char* scan_number(const char* p, const char* stop, JsonNumber& out,
                                                      const char*& error_at, const char*& expected) {
  const char* const start = p;
  const auto digit = [stop](const char* at) {
    return at < stop && static_cast<unsigned char>(*at - '0') < 10;
  };
  const auto refuse = [&](const char* at, const char* why) -> const char* {
    error_at = at;
    expected = why;
    return nullptr;
  };
  const bool negative = p < stop && *p == '-';
  if (negative) ++p;
  if (!digit(p)) return refuse(p, "expected a digit");
  uint64_t value = 0;
  bool overflow = false;  // more than 64 bits (exact: no division per digit)
  if (*p == '0') {
    ++p;
  } else {
    // 19 digits never overflow 64 bits: checked only past them.
    const char* const plain_end = stop - p > 19 ? p + 19 : stop;
    while (p < plain_end && static_cast<unsigned char>(*p - '0') < 10)
      value = value * 10 + static_cast<uint64_t>(*p++ - '0');
    while (digit(p)) {
      const auto d = static_cast<uint64_t>(*p - '0');
      overflow |= __builtin_mul_overflow(value, uint64_t{10}, &value);
      overflow |= __builtin_add_overflow(value, d, &value);
      ++p;
    }
  }
  bool is_float = false;
  // A fraction's or exponent's value is value * 10^q, for decimal_to_double, while `value` holds every
  // digit exactly (else the text goes to std::from_chars).
  bool exact = !overflow;
  int64_t q = 0;
  if (p < stop && *p == '.') {
    ++p;
    if (!digit(p)) return refuse(p, "expected a digit after the decimal point");
    const char* const fraction = p;
    // Log-probs are written with 16-17 significant digits: eight at a time, then one at a time.
    constexpr uint64_t kRoomForEight = (UINT64_MAX - 99999999) / 100000000;
    while (stop - p >= 8 && eight_digits(p)) {
      exact = exact && value <= kRoomForEight;
      if (exact) value = value * 100000000 + eight_digit_value(p);
      p += 8;
    }
    while (digit(p)) {
      exact = exact && value <= (UINT64_MAX - 9) / 10;
      if (exact) value = value * 10 + static_cast<uint64_t>(*p - '0');
      ++p;
    }
    q = -(p - fraction);
    is_float = true;
  }
  if (p < stop && (*p == 'e' || *p == 'E')) {
    ++p;
    const bool negative_exponent = p < stop && *p == '-';
    if (p < stop && (*p == '+' || *p == '-')) ++p;
    if (!digit(p)) return refuse(p, "expected a digit in the exponent");
    int64_t exponent = 0;
    while (digit(p)) {
      if (exponent < 1000000) exponent = exponent * 10 + (*p - '0');  // beyond: from_chars decides
      ++p;
    }
    q += negative_exponent ? -exponent : exponent;
    is_float = true;
  }
  constexpr uint64_t kMinMagnitude = uint64_t{1} << 63;  // |INT64_MIN|
  if (!is_float && !overflow && (!negative || value <= kMinMagnitude)) {
    out.kind = negative ? JsonNumberKind::kSigned : JsonNumberKind::kUnsigned;
    if (negative)
      out.value.i = value == kMinMagnitude ? INT64_MIN : -static_cast<int64_t>(value);
    else
      out.value.u = value;
    return p;
  }
  out.kind = JsonNumberKind::kFloat;
  if (exact && q > -100000000 && q < 100000000) {
    if (const std::optional<double> d = decimal_to_double(value, static_cast<int>(q), negative)) {
      out.value.d = *d;
      return p;
    }
  }
  const std::optional<double> d = text_to_double(start, p);
  if (!d) return refuse(p, nullptr);
  out.value.d = *d;
  return p;
}

}  // namespace crl::json_scan
