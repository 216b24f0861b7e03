#pragma once
// The methods of Python's str that chat templates call ("x".strip(), .split(), .startswith(), ...), and the
// string helpers the filters share. Case mapping (upper, lower, title, capitalize) is ASCII only: other
// letters are left as they are (Python maps all of Unicode; documented in engine/README.md).
#include <string>
#include <string_view>

#include "engine/jinja/interpreter.h"
#include "engine/jinja/value.h"

namespace crl::jinja {

Value call_string_method(Interpreter& in, const std::string& s, const std::string& name,
                         const CallArgs& args);

// Python's str.strip / lstrip / rstrip: `chars` null strips whitespace, otherwise the code points in it.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string ascii_title(std::string s);
std::string ascii_capitalize(std::string s);
// Python's str.replace(old, new, count); count < 0 replaces all.
std::string replace_all(Interpreter& in, const std::string& s, const std::string& from, const std::string& to,
                        int64_t count);

}  // namespace crl::jinja
