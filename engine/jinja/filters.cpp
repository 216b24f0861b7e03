// Filters and tests (declared in builtins.h), with jinja2 3.1's semantics; tojson is Hugging Face's.
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "engine/jinja/builtins.h"
#include "engine/jinja/string_methods.h"

namespace crl::jinja {

namespace {

const Value* arg(const CallArgs& args, size_t position, const char* name) {
  if (position < args.positional.size()) return &args.positional[position];
  return args.named_arg(name);
}

size_t length_of(Interpreter& in, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return utf8_length(v.as_string());
    case Value::Kind::kList:
      return v.as_list().size();
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      return v.as_dict().items.size();
    default:
      in.fail(ErrorKind::kType, "object of type '" + v.type_name() + "' has no len()");
  }
}

// Looks up "a.b" on an item (selectattr, map(attribute=...), join(attribute=...)).
Value attribute_of(Interpreter& in, const Value& item, const std::string& path) {
  Value v = item;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(path.find('.', begin), path.size());
    v = get_item(in, v, Value(path.substr(begin, end - begin)));
    if (end == path.size()) return v;
    begin = end + 1;
  }
}

std::optional<int64_t> parse_int(const std::string& text) {
  const std::string s = strip(text, nullptr, true, true);
  if (s.empty()) return std::nullopt;
  size_t used = 0;
  try {
    const long long v = std::stoll(s, &used, 10);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::optional<double> parse_float(const std::string& text) {
  const std::string s = strip(text, nullptr, true, true);
  if (s.empty()) return std::nullopt;
  size_t used = 0;
  try {
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// selectattr / rejectattr / select / reject: the items whose (attribute's) value passes the test.
Value select(Interpreter& in, const Value& input, const CallArgs& args, bool by_attribute, bool keep) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty() || !args.positional[0].is_string())
      in.fail(ErrorKind::kType, "selectattr/rejectattr need an attribute name");
    attribute = args.positional[0].as_string();
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) in.fail(ErrorKind::kType, "the test name must be a string");
    test = args.positional[next].as_string();
    test_args.positional.assign(args.positional.begin() + static_cast<long>(next) + 1, args.positional.end());
  }
  List out;
  for (const Value& item : iterate(in, input)) {
    const Value v = by_attribute ? attribute_of(in, item, attribute) : item;
    const bool pass = test.empty() ? v.truthy() : apply_test(in, test, v, test_args);
    if (pass == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, const Value& input, const CallArgs& args) {
  const auto& p = args.positional;
  if (name == "tojson") {
    const Value* indent = arg(args, 0, "indent");
    if (indent && !indent->is_none() && !indent->is_int())
      in.fail(ErrorKind::kType, "tojson indent must be an integer");
    if (const Value* sort = args.named_arg("sort_keys"); sort && sort->truthy())
      in.fail(ErrorKind::kType, "tojson(sort_keys=true) is not supported");
    if (input.is_undefined()) in.fail(ErrorKind::kUndefined, input.undefined_hint());
    try {
      return Value(to_json(input, indent && indent->is_int() ? static_cast<int>(indent->as_int()) : -1));
    } catch (const std::invalid_argument& e) {
      in.fail(ErrorKind::kType, e.what());
    } catch (const std::length_error& e) {
      in.fail(ErrorKind::kLimit, e.what());
    }
  }
  if (name == "trim") {
    const Value* chars = arg(args, 0, "chars");
    const std::string* set = chars && chars->is_string() ? &chars->as_string() : nullptr;
    return Value(strip(input.str(), set, true, true));
  }
  if (name == "length" || name == "count") return Value(static_cast<int64_t>(length_of(in, input)));
  if (name == "upper") return Value(ascii_upper(input.str()));
  if (name == "lower") return Value(ascii_lower(input.str()));
  if (name == "title") return Value(ascii_title(input.str()));
  if (name == "capitalize") return Value(ascii_capitalize(input.str()));
  if (name == "string") return Value(input.str());
  if (name == "safe") return input;
  if (name == "default" || name == "d") {
    const Value* fallback = arg(args, 0, "default_value");
    const Value* boolean = arg(args, 1, "boolean");
    const bool use = input.is_undefined() || (boolean && boolean->truthy() && !input.truthy());
    return use ? (fallback ? *fallback : Value(std::string())) : input;
  }
  if (name == "join") {
    const Value* sep = arg(args, 0, "d");
    const Value* attribute = arg(args, 1, "attribute");
    const std::string d = sep ? sep->str() : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(in, input)) {
      if (!first) out += d;
      first = false;
      out += (attribute ? attribute_of(in, item, attribute->str()) : item).str();
      in.check_size(out.size(), "string");
    }
    return Value(std::move(out));
  }
  if (name == "first" || name == "last") {
    if (input.is_undefined()) in.fail(ErrorKind::kUndefined, input.undefined_hint());
    const List items = iterate(in, input);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "items") {
    if (input.is_undefined()) return Value(List{});
    if (!input.is_dict()) in.fail(ErrorKind::kType, "items filter needs a mapping, got " + input.type_name());
    List out;
    for (const auto& [k, v] : input.as_dict().items) out.push_back(Value(List{Value(k), v}));
    return Value(std::move(out));
  }
  if (name == "list") return Value(iterate(in, input));
  if (name == "reverse") {
    if (input.is_string()) {
      List chars = iterate(in, input);
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->as_string();
      return Value(std::move(out));
    }
    List items = iterate(in, input);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "unique") {
    List out;
    for (const Value& item : iterate(in, input)) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& v) { return equal(v, item); }))
        out.push_back(item);
    }
    return Value(std::move(out));
  }
  if (name == "int") {
    const Value* fallback = arg(args, 0, "default");
    const Value def = fallback ? *fallback : Value(int64_t{0});
    if (input.is_bool() || input.is_int()) return Value(input.as_int());
    if (input.is_float()) {
      const double f = input.as_float();
      if (!std::isfinite(f) || std::fabs(f) > 9.2e18) return def;
      return Value(static_cast<int64_t>(f));
    }
    if (input.is_string()) {
      if (auto v = parse_int(input.as_string())) return Value(*v);
      if (auto f = parse_float(input.as_string()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18)
        return Value(static_cast<int64_t>(*f));
    }
    return def;
  }
  if (name == "float") {
    const Value* fallback = arg(args, 0, "default");
    const Value def = fallback ? *fallback : Value(0.0);
    if (input.is_number()) return Value(input.as_float());
    if (input.is_string()) {
      if (auto f = parse_float(input.as_string())) return Value(*f);
    }
    return def;
  }
  if (name == "abs") {
    if (input.is_float()) return Value(std::fabs(input.as_float()));
    if (input.is_int() || input.is_bool())
      return Value(input.as_int() < 0 ? -input.as_int() : input.as_int());
    in.fail(ErrorKind::kType, "bad operand type for abs(): '" + input.type_name() + "'");
  }
  if (name == "replace") {
    if (p.size() < 2) in.fail(ErrorKind::kType, "replace needs old and new strings");
    const Value* count = arg(args, 2, "count");
    return Value(replace_all(in, input.str(), p[0].str(), p[1].str(),
                             count && count->is_int() ? count->as_int() : -1));
  }
  if (name == "selectattr" || name == "rejectattr")
    return select(in, input, args, true, name == "selectattr");
  if (name == "select" || name == "reject") return select(in, input, args, false, name == "select");
  if (name == "map") {
    List out;
    if (const Value* attribute = args.named_arg("attribute")) {
      const Value* fallback = args.named_arg("default");
      for (const Value& item : iterate(in, input)) {
        Value v = attribute_of(in, item, attribute->str());
        out.push_back(v.is_undefined() && fallback ? *fallback : v);
      }
      return Value(std::move(out));
    }
    if (p.empty() || !p[0].is_string()) in.fail(ErrorKind::kType, "map needs a filter name or attribute=");
    CallArgs rest;
    rest.positional.assign(p.begin() + 1, p.end());
    for (const Value& item : iterate(in, input))
      out.push_back(apply_filter(in, p[0].as_string(), item, rest));
    return Value(std::move(out));
  }
  if (name == "sum" || name == "min" || name == "max") {
    const List items = iterate(in, input);
    if (name == "sum") {
      Value total(int64_t{0});
      for (const Value& v : items) {
        if (!v.is_number()) in.fail(ErrorKind::kType, "sum of a non-number " + v.type_name());
        total = total.is_float() || v.is_float() ? Value(total.as_float() + v.as_float())
                                                 : Value(total.as_int() + v.as_int());
      }
      return total;
    }
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    Value best = items[0];
    for (const Value& v : items) {
      if (name == "min" ? less(in, v, best) : less(in, best, v)) best = v;
    }
    return best;
  }
  if (name == "round") {
    const Value* precision = arg(args, 0, "precision");
    const int64_t digits = precision && precision->is_int() ? precision->as_int() : 0;
    const double scale = std::pow(10.0, static_cast<double>(digits));
    return Value(std::round(input.as_float() * scale) / scale);
  }
  in.fail(ErrorKind::kSyntax, "unknown filter " + quote(name));
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, const CallArgs& args) {
  const Value* other = args.positional.empty() ? nullptr : &args.positional[0];
  const auto need_other = [&]() -> const Value& {
    if (!other) in.fail(ErrorKind::kType, "test " + quote(name) + " needs an argument");
    return *other;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) in.fail(ErrorKind::kType, "test " + quote(name) + " needs an integer");
    if (name == "divisibleby") {
      const Value& d = need_other();
      if (!d.is_int() || d.as_int() == 0) in.fail(ErrorKind::kType, "divisibleby needs a non-zero integer");
      return v.as_int() % d.as_int() == 0;
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, need_other());
  if (name == "ne" || name == "!=") return !equal(v, need_other());
  if (name == "lt" || name == "lessthan" || name == "<") return less(in, v, need_other());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(in, need_other(), v);
  if (name == "le" || name == "<=") return !less(in, need_other(), v);
  if (name == "ge" || name == ">=") return !less(in, v, need_other());
  if (name == "in") return contains(in, need_other(), v);
  if (name == "sameas") {
    const Value& o = need_other();
    if (v.is_none() || o.is_none() || v.is_bool() || o.is_bool())
      return v.kind() == o.kind() && (!v.is_bool() || v.as_bool() == o.as_bool());
    return false;
  }
  if (name == "lower") return v.is_string() && ascii_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && ascii_upper(v.as_string()) == v.as_string();
  in.fail(ErrorKind::kSyntax, "unknown test " + quote(name));
}

}  // namespace crl::jinja
