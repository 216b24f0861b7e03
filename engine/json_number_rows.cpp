// An array read as rows of numbers (engine/json_number_rows.h).
#include "engine/json_number_rows.h"

#include <cstring>
#include <vector>

#include "engine/json_number_scan.h"

namespace crl {

size_t read_number_rows(std::string_view source, size_t open, JsonNumberRows& rows) {
  const char* const text = source.data();
  const char* const stop = text + source.size();
  const auto space = [stop](const char* p) {
    while (p < stop && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
    return p;
  };
  // Straight code, no closures over the position: this loop is most of reading an answer.
  std::vector<JsonNumber>& cells = rows.cells;
  cells.clear();
  const int numbers = rows.bracketed ? rows.numbers : 1;
  JsonNumber value;
  const char* error_at = nullptr;
  const char* expected = nullptr;
  const char* p = space(text + open + 1);  // past '['
  if (p < stop && *p == ']') return static_cast<size_t>(p + 1 - text);
  while (true) {
    if (rows.bracketed) {
      if (p >= stop || *p != '[') return 0;
      p = space(p + 1);
    }
    for (int k = 0; k < numbers; ++k) {
      if (k > 0) {
        p = space(p);
        if (p >= stop || *p != ',') return 0;
        p = space(p + 1);
      }
      p = json_scan::scan_number(p, stop, value, error_at, expected);
      if (p == nullptr) return 0;
      cells.push_back(value);
    }
    if (rows.bracketed) {
      for (int k = 0; k < rows.nulls; ++k) {
        p = space(p);
        if (p >= stop || *p != ',') return 0;
        p = space(p + 1);
        if (stop - p < 4 || std::memcmp(p, "null", 4) != 0) return 0;
        p += 4;
      }
      p = space(p);
      if (p >= stop || *p != ']') return 0;
      ++p;
    }
    p = space(p);
    if (p < stop && *p == ']') return static_cast<size_t>(p + 1 - text);
    if (p >= stop || *p != ',') return 0;
    p = space(p + 1);
  }
}

}  // namespace crl
