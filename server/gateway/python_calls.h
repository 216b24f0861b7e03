#pragma once
// A list of Python function calls as pythonic tool-calling models write them (tool_call_format.h
// `pythonic`): "[get_weather(city='Paris', days=2), now()]". The reading is strict, as vLLM's (which uses
// Python's ast): a list of calls of plain names with keyword arguments only, whose values are literals
// (strings in single or double quotes with Python's escapes, integers, floats, True, False, None, lists,
// tuples and dicts of them with string keys). Anything else is not a list of calls.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crl::server::gateway {

struct PythonCall {
  std::string name;
  nlohmann::ordered_json arguments;  // an object: the keyword arguments in the order written
};

// The calls of `text` (blanks around the list allowed), or nullopt when it is not such a list (an empty
// list, a positional argument, a keyword given twice, an expression, text around the list, nesting deeper
// than 64, are all "not a list of calls").
std::optional<std::vector<PythonCall>> read_python_calls(std::string_view text);

}  // namespace crl::server::gateway
