#pragma once
// One JSON string (and number) writer for every hand-written JSON output (the wire codec's canonical JSON,
// the Jinja `tojson` filter): `"`, `\` and control characters escaped (\n \r \t \b \f, others \u00XX in
// lowercase hex), everything else, UTF-8 included, copied as is (what Python's json.dumps(ensure_ascii=False)
// writes). The caller checks or repairs UTF-8 first when its input may be invalid.
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace crl {

void append_json_string(std::string& out, std::string_view s);

// Numbers as JSON text, appended in place (hot paths: 8k-id prompts): integers in decimal, doubles in the
// shortest form that reads back to the same bits (std::to_chars).
inline void append_json_int(std::string& out, int64_t value) {
  char buffer[24];
  out.append(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
}
// A non-negative integer in decimal at `out` (room for 10 characters), returning the end: the token-id lists
// of prompts (server/gateway/prompt_ids_text.h) write thousands per call. Two digits per step from a table,
// the length found by comparisons first: 1.4-2.4 ns an id against std::to_chars' 4 ns (bench_gateway
// BM_PromptIdsText).
inline char* put_decimal(char* out, uint32_t value) {
  static constexpr char kPairs[201] =
      "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
      "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  const unsigned length = value < 10           ? 1
                          : value < 100        ? 2
                          : value < 1000       ? 3
                          : value < 10000      ? 4
                          : value < 100000     ? 5
                          : value < 1000000    ? 6
                          : value < 10000000   ? 7
                          : value < 100000000  ? 8
                          : value < 1000000000 ? 9
                                               : 10;
  char* p = out + length;
  while (value >= 100) {
    const uint32_t pair = value % 100;
    value /= 100;
    p -= 2;
    std::memcpy(p, kPairs + 2 * pair, 2);
  }
  if (value >= 10)
    std::memcpy(p - 2, kPairs + 2 * value, 2);
  else
    p[-1] = static_cast<char>('0' + value);
  return out + length;
}
inline void append_json_double(std::string& out, double value) {
  char buffer[32];
  out.append(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
}

}  // namespace crl
