#pragma once
// The builtins real chat templates use, with the semantics of jinja2 3.1 and Python 3 (engine/README.md
// lists them): filters, tests, the methods of str / dict, attribute and subscript lookup, and the globals
// (range, namespace, dict, raise_exception, strftime_now). Errors go through Interpreter::fail, so they name
// the template and the line.
#include <string>

#include "engine/jinja/interpreter.h"
#include "engine/jinja/value.h"

namespace crl::jinja {

// obj.name: a dict key (a dict method name first: `d.items` is the method, as in jinja2), a namespace
// attribute, a method of str or dict; otherwise undefined. Throws (kUndefined) if obj is undefined.
Value get_attribute(Interpreter& in, const Value& obj, const std::string& name);
// obj[key]: a dict key, a list or str index (negative from the end); falls back to get_attribute for a
// string key; undefined when missing or out of range.
Value get_item(Interpreter& in, const Value& obj, const Value& key);
// obj[start:stop:step] on a list or a str (code points); null bounds are omitted ones.
Value get_slice(Interpreter& in, const Value& obj, const Value* start, const Value* stop, const Value* step);

Value apply_filter(Interpreter& in, const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& input, const CallArgs& args);
// The global functions, for the render context.
Dict builtin_globals();

// Python's `needle in container` (substring, list member, dict key).
bool contains(Interpreter& in, const Value& container, const Value& needle);
// Python's < (numbers, strings, lists); throws kType for other pairs.
bool less(Interpreter& in, const Value& a, const Value& b);
// The items of an iterable (a list, the keys of a dict, the code points of a str, nothing for undefined).
List iterate(Interpreter& in, const Value& v);

}  // namespace crl::jinja
