#pragma once
// One JSON string writer for every hand-written JSON output (the wire codec's canonical JSON, the Jinja
// `tojson` filter): `"`, `\` and control characters escaped (\n \r \t \b \f, others \u00XX in lowercase hex),
// everything else, UTF-8 included, copied as is (what Python's json.dumps(ensure_ascii=False) writes). The
// caller checks or repairs UTF-8 first when its input may be invalid.
#include <string>
#include <string_view>

namespace crl {

void append_json_string(std::string& out, std::string_view s);

}  // namespace crl
