#pragma once
// One JSON string (and number) writer for every hand-written JSON output (the wire codec's canonical JSON,
// the Jinja `tojson` filter): `"`, `\` and control characters escaped (\n \r \t \b \f, others \u00XX in
// lowercase hex), everything else, UTF-8 included, copied as is (what Python's json.dumps(ensure_ascii=False)
// writes). The caller checks or repairs UTF-8 first when its input may be invalid.
#include <charconv>
#include <cstdint>
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
inline void append_json_double(std::string& out, double value) {
  char buffer[32];
  out.append(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
}

}  // namespace crl
