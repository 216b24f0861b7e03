// decimal_to_double (engine/decimal_double.h): its table checked with exact integers of the test's own, and
// its answers against std::from_chars on millions of numbers (log-probs as SGLang writes them, random
// significands and exponents, values next to halfway between two doubles), and through the JSON reader.
#include "engine/decimal_double.h"

#include <gtest/gtest.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/json_view.h"

namespace crl {
namespace {

// Unsigned integers of any size, 32-bit limbs, least significant first: just what the table's check needs.
using Big = std::vector<uint32_t>;

Big big(uint64_t v) {
  Big out;
  for (; v != 0; v >>= 32) out.push_back(static_cast<uint32_t>(v));
  return out;
}
Big multiply(const Big& a, const Big& b) {
  Big out(a.size() + b.size(), 0);
  for (size_t i = 0; i < a.size(); ++i) {
    uint64_t carry = 0;
    for (size_t j = 0; j < b.size(); ++j) {
      const uint64_t t = uint64_t{a[i]} * b[j] + out[i + j] + carry;
      out[i + j] = static_cast<uint32_t>(t);
      carry = t >> 32;
    }
    for (size_t k = i + b.size(); carry != 0; ++k) {
      const uint64_t t = uint64_t{out[k]} + carry;
      out[k] = static_cast<uint32_t>(t);
      carry = t >> 32;
    }
  }
  while (!out.empty() && out.back() == 0) out.pop_back();
  return out;
}
size_t bit_length(const Big& a) {
  return a.empty() ? 0 : (a.size() - 1) * 32 + static_cast<size_t>(std::bit_width(a.back()));
}
bool bit(const Big& a, size_t i) {
  return i / 32 < a.size() && ((a[i / 32] >> (i % 32)) & 1) != 0;
}
Big power_of(uint64_t base, int n) {
  Big out = big(1);
  for (int i = 0; i < n; ++i) out = multiply(out, big(base));
  return out;
}
// a - b, a >= b.
Big subtract(Big a, const Big& b) {
  int64_t borrow = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t t = int64_t{a[i]} - (i < b.size() ? int64_t{b[i]} : 0) - borrow;
    borrow = t < 0;
    if (t < 0) t += int64_t{1} << 32;
    a[i] = static_cast<uint32_t>(t);
  }
  while (!a.empty() && a.back() == 0) a.pop_back();
  return a;
}
bool less(const Big& a, const Big& b) {
  if (a.size() != b.size()) return a.size() < b.size();
  for (size_t i = a.size(); i-- > 0;)
    if (a[i] != b[i]) return a[i] < b[i];
  return false;
}
Big of128(uint64_t hi, uint64_t lo) {
  return {static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32), static_cast<uint32_t>(hi),
          static_cast<uint32_t>(hi >> 32)};
}

// Every entry is 10^q's significand rounded down: for q >= 0 the top 128 bits of 10^q; for q < 0 the T
// with T * 10^-q <= 2^k < (T + 1) * 10^-q for a power of two 2^k, bit 127 of T set.
TEST(DecimalToDouble, TheTableHoldsThePowersOfTenRoundedDown) {
  int checked = 0;
  for (int q = -400; q <= 400; ++q) {
    uint64_t hi = 0, lo = 0;
    if (!power_of_ten_significand(q, hi, lo)) continue;
    ASSERT_TRUE(hi >> 63) << q;
    const Big t = of128(hi, lo);
    if (q >= 0) {
      const Big p = power_of(10, q);
      const size_t n = bit_length(p);
      for (size_t i = 0; i < 128; ++i) {  // bit 127 - i of T is bit n - 1 - i of 10^q (0 past its end)
        const bool expected = n >= i + 1 && bit(p, n - 1 - i);
        ASSERT_EQ(bit(t, 127 - i), expected) << "1e" << q << " bit " << 127 - i;
      }
    } else {
      const Big d = power_of(10, -q);
      const Big product = multiply(t, d);
      Big two_k(bit_length(product) / 32 + 1, 0);  // the power of two just above the product
      two_k[bit_length(product) / 32] = uint32_t{1} << (bit_length(product) % 32);
      ASSERT_TRUE(less(subtract(two_k, product), d)) << "1e" << q;  // 2^k - T * d < d
    }
    ++checked;
  }
  EXPECT_GT(checked, 150);
}

double from_chars_double(const std::string& text) {
  double d = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), d);
  EXPECT_EQ(error, std::errc()) << text;
  return d;
}

uint64_t bits_of(double d) {
  return std::bit_cast<uint64_t>(d);
}

// One case: w * 10^q; where decimal_to_double answers, it is from_chars' double, bit for bit.
struct Tally {
  int answered = 0, declined = 0;
};
void check(uint64_t w, int q, bool negative, Tally& tally) {
  const std::optional<double> d = decimal_to_double(w, q, negative);
  if (!d) {
    ++tally.declined;
    return;
  }
  ++tally.answered;
  const std::string text = (negative ? "-" : "") + std::to_string(w) + "e" + std::to_string(q);
  ASSERT_EQ(bits_of(*d), bits_of(from_chars_double(text))) << text;
}

TEST(DecimalToDouble, AgreesWithFromCharsOnLogProbsAsServersWriteThem) {
  // SGLang's log-probs: float32 values widened to double and written shortest (Python's repr), 17
  // significant digits mostly; and the same at 17 digits with printf, as other servers do.
  std::mt19937_64 rng(2026);
  Tally tally;
  char buffer[64];
  for (int i = 0; i < 1000000; ++i) {
    const float f =
        -std::ldexp(static_cast<float>(rng() % (1u << 24)) / (1u << 24), -static_cast<int>(rng() % 40));
    const double widened = f;
    const auto written = std::to_chars(buffer, buffer + sizeof buffer, widened);
    const std::string shortest(buffer, written.ptr);
    std::snprintf(buffer, sizeof buffer, "%.17g", widened);
    for (const std::string& text : {shortest, std::string(buffer)}) {
      // the text's significand and exponent, as the JSON reader reads them
      uint64_t w = 0;
      int q = 0, e = 0;
      bool fraction = false;
      size_t at = text[0] == '-' ? 1 : 0;
      for (; at < text.size() && text[at] != 'e'; ++at) {
        if (text[at] == '.') {
          fraction = true;
          continue;
        }
        w = w * 10 + static_cast<uint64_t>(text[at] - '0');
        if (fraction) --q;
      }
      if (at < text.size()) e = std::stoi(text.substr(at + 1));
      const std::optional<double> d = decimal_to_double(w, q + e, text[0] == '-');
      if (!d) {
        ++tally.declined;
        continue;
      }
      ++tally.answered;
      ASSERT_EQ(bits_of(*d), bits_of(widened)) << text;
    }
  }
  EXPECT_GT(tally.answered, 1999000) << tally.declined;  // the fast answer is the rule
}

TEST(DecimalToDouble, AgreesWithFromCharsOnRandomSignificandsAndExponents) {
  std::mt19937_64 rng(7);
  Tally tally;
  for (int i = 0; i < 2000000; ++i) {
    const int digits = 1 + static_cast<int>(rng() % 19);
    uint64_t w = rng() % 10000000000000000000ull;
    for (int d = digits; d < 19; ++d) w /= 10;
    const int q = static_cast<int>(rng() % 241) - 120;
    check(w, q, (rng() & 1) != 0, tally);
  }
  // The full 64-bit range of significands, and the edges of the table and of the doubles.
  for (int i = 0; i < 200000; ++i) check(rng(), static_cast<int>(rng() % 161) - 96, false, tally);
  for (const int q : {-400, -343, -324, -308, -97, -96, 64, 65, 290, 308, 309})
    for (const uint64_t w :
         {uint64_t{1}, uint64_t{17976931348623157}, uint64_t{22250738585072014}, ~uint64_t{0}})
      check(w, q, false, tally);
  EXPECT_GT(tally.answered, 1500000) << tally.declined;  // (q past the table: declined)
}

// Next to halfway between two doubles, where rounding is decided by digits far down: the midpoint of a
// random double and the next one, written exactly, then cut to 17-19 significant digits and nudged by one
// in the last digit. Here the fast answer may decline (then from_chars decides), but never be wrong.
TEST(DecimalToDouble, NeverWrongNextToHalfway) {
  std::mt19937_64 rng(11);
  Tally tally;
  char buffer[1200];
  for (int i = 0; i < 200000; ++i) {
    const double a =
        std::ldexp(static_cast<double>(rng() >> 11) + 0.5, static_cast<int>(rng() % 200) - 100 - 53);
    if (!std::isnormal(a)) continue;
    std::snprintf(buffer, sizeof buffer, "%.60e", a);  // glibc writes it exactly (enough digits here)
    const std::string text(buffer);
    const size_t e = text.find('e');
    std::string digits = text.substr(0, 1) + text.substr(2, e - 2);
    const int exponent = std::stoi(text.substr(e + 1));
    for (const int keep : {17, 18, 19}) {
      const uint64_t cut = std::stoull(digits.substr(0, static_cast<size_t>(keep)));
      const int q = exponent - (keep - 1);
      for (const uint64_t w : {cut - 1, cut, cut + 1}) check(w, q, false, tally);
    }
  }
  EXPECT_GT(tally.answered, 1000000);
}

// Through the JSON reader: its numbers are from_chars' (the reader takes the fast answer or from_chars).
TEST(DecimalToDouble, TheJsonReadersNumbersAreFromCharsDoubles) {
  std::mt19937_64 rng(5);
  const char* kForms[] = {"%.17g", "%.6e", "%.3f", "%.20g", "%.25f", "%.1e"};
  char buffer[128];
  for (int i = 0; i < 200000; ++i) {
    const double value = std::ldexp(static_cast<double>(rng() >> 11), static_cast<int>(rng() % 120) - 90) *
                         ((rng() & 1) ? -1 : 1);
    std::snprintf(buffer, sizeof buffer, kForms[i % std::size(kForms)], value);
    std::string text(buffer);
    if (text.find('.') == std::string::npos && text.find('e') == std::string::npos) text += ".0";
    if (text.find("inf") != std::string::npos || text.find("nan") != std::string::npos) continue;
    const JsonDocument doc = JsonDocument::parse(text, "test");
    ASSERT_EQ(bits_of(doc.root().number()), bits_of(from_chars_double(text))) << text;
  }
  // Leading zeros in a fraction, more than 19 digits, huge exponents.
  for (const std::string text :
       {"0.000123", "-0.0", "0.0000000000000000000000012345678901234567890123", "123456789012345678901234.5",
        "1e-400", "4.9406564584124654e-324", "2.2250738585072011e-308", "1.7976931348623157e308",
        "9007199254740993.0", "0.1e000000000000000000000000001", "1e-0000000000000000000000000000005"}) {
    const JsonDocument doc = JsonDocument::parse(text, "test");
    EXPECT_EQ(bits_of(doc.root().number()), bits_of(std::strtod(text.c_str(), nullptr))) << text;
  }
}

}  // namespace
}  // namespace crl
