// The hand-written JSON number writers (engine/json_escape.h) against std::to_chars.
#include "engine/json_escape.h"

#include <gtest/gtest.h>

#include <charconv>
#include <limits>
#include <random>
#include <string_view>

namespace crl {
namespace {

std::string_view reference_decimal(char (&buffer)[16], uint32_t value) {
  return std::string_view(buffer,
                          static_cast<size_t>(std::to_chars(buffer, buffer + 16, value).ptr - buffer));
}

// Every length's edges (9, 10, 99, 100, ...), the largest value, and a million random ones of every size.
TEST(JsonEscape, PutDecimalWritesWhatToCharsWrites) {
  std::vector<uint32_t> values = {0, std::numeric_limits<uint32_t>::max()};
  for (uint64_t power = 1; power <= 1000000000ull; power *= 10) {
    for (const uint64_t v : {power - 1, power, power + 1, 2 * power, 9 * power + 9})
      if (v <= std::numeric_limits<uint32_t>::max()) values.push_back(static_cast<uint32_t>(v));
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1000000; ++i) values.push_back(static_cast<uint32_t>(rng() >> (32 + rng() % 32)));
  for (const uint32_t value : values) {
    char expected[16], out[16];
    std::memset(out, '#', sizeof out);
    const char* end = put_decimal(out, value);
    ASSERT_EQ(std::string_view(out, static_cast<size_t>(end - out)), reference_decimal(expected, value))
        << value;
    ASSERT_EQ(*end, '#') << "nothing written past the end: " << value;
  }
}

}  // namespace
}  // namespace crl
