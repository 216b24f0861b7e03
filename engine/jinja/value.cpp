#include "engine/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/json_escape.h"

namespace crl::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::named_arg(std::string_view name) const {
  for (const auto& [k, v] : named) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.p_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double f) : kind_(Kind::kFloat), f_(f) {}
// Not a const object: unique_string() may append to it while this value is its only owner.
Value::Value(std::string s) : kind_(Kind::kString), p_(std::make_shared<std::string>(std::move(s))) {}

std::string* Value::unique_string() {
  if (kind_ != Kind::kString || p_.use_count() != 1) return nullptr;
  return const_cast<std::string*>(static_cast<const std::string*>(p_.get()));
}
Value::Value(List list) : kind_(Kind::kList) {
  for (const Value& v : list) depth_ = std::max(depth_, v.depth_ + 1);
  depth_ = std::max<uint32_t>(depth_, 1);
  p_ = std::make_shared<const List>(std::move(list));
}

Value::Value(Dict dict) : kind_(Kind::kDict) {
  for (const auto& [k, v] : dict.items) depth_ = std::max(depth_, v.depth_ + 1);
  depth_ = std::max<uint32_t>(depth_, 1);
  p_ = std::make_shared<Dict>(std::move(dict));
}

Value Value::shared_dict(std::shared_ptr<Dict> dict) {
  Value v;
  v.kind_ = Kind::kDict;
  for (const auto& [k, item] : dict->items) v.depth_ = std::max(v.depth_, item.depth_ + 1);
  v.depth_ = std::max<uint32_t>(v.depth_, 1);
  v.p_ = std::shared_ptr<const Dict>(std::move(dict));
  return v;
}

Value Value::make_namespace(Dict attributes) {
  Value v(std::move(attributes));
  v.kind_ = Kind::kNamespace;
  v.depth_ = 1;
  return v;
}

Value Value::callable(std::shared_ptr<const Callable> c) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.p_ = std::move(c);
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().empty();
    case Kind::kDict:
      return !as_dict().items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string python_float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-d.ddde+XX"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exponent < -4 || exponent >= 16) {  // Python's repr switches to exponent notation here
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int a = std::abs(exponent);
    out += std::string("e") + (exponent < 0 ? "-" : "+") + (a < 10 ? "0" : "") + std::to_string(a);
    return out;
  }
  const int point = exponent + 1;  // digits before the decimal point
  std::string out;
  if (point <= 0) {
    out = "0." + std::string(static_cast<size_t>(-point), '0') + digits;
  } else if (static_cast<size_t>(point) >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(point) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
  }
  return sign + out;
}

namespace {

// Python's repr of a str: single quotes unless the text holds ' and no ", backslash escapes for the quote,
// the backslash and control characters.
std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return repr();
  }
}

namespace {
thread_local int repr_depth = 0;
struct ReprDepth {
  ReprDepth() {
    if (++repr_depth > kMaxValueDepth) {
      repr_depth = 0;
      throw std::length_error("a value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
    }
  }
  ~ReprDepth() { repr_depth = std::max(0, repr_depth - 1); }
};
}  // namespace

std::string Value::repr() const {
  const ReprDepth guard;
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return python_float_repr(f_);
    case Kind::kString:
      return python_string_repr(as_string());
    case Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < as_list().size(); ++k) out += (k ? ", " : "") + as_list()[k].repr();
      return out + "]";
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = kind_ == Kind::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : as_dict().items) {
        out += (first ? "" : ", ") + python_string_repr(k) + ": " + v.repr();
        first = false;
      }
      return out + (kind_ == Kind::kNamespace ? "}>" : "}");
    }
    case Kind::kCallable:
      return "<" + as_callable().name() + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool equal(const Value& a, const Value& b) {
  const ReprDepth guard;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t k = 0; k < x.size(); ++k) {
        if (!equal(x[k], y[k])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict &x = a.as_dict(), &y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !equal(v, *w)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.as_dict() == &b.as_dict();
    case Value::Kind::kCallable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

namespace {

// Both nlohmann types: nlohmann::json (keys sorted) and nlohmann::ordered_json (insertion order).
template <typename Json>
Value value_of_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value(j.template get<double>());
    case Json::value_t::string:
      return Value(j.template get<std::string>());
    case Json::value_t::array: {
      List list;
      list.reserve(j.size());
      for (const auto& e : j) list.push_back(value_of_json(e));
      return Value(std::move(list));
    }
    case Json::value_t::object: {
      Dict dict;
      dict.items.reserve(j.size());
      for (const auto& [k, v] : j.items()) dict.items.emplace_back(k, value_of_json(v));
      return Value(std::move(dict));
    }
    default:
      return Value::none();
  }
}

}  // namespace

Value from_json(const nlohmann::json& j) {
  return value_of_json(j);
}
Value from_json(const nlohmann::ordered_json& j) {
  return value_of_json(j);
}

namespace {

void json_string(const std::string& s, std::string& out) {
  append_json_string(out, s);
}

void json_value(const Value& v, int indent, int depth, std::string& out) {
  if (depth > kMaxValueDepth)
    throw std::length_error("a value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  const auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      const double f = v.as_float();
      out += std::isnan(f)   ? "NaN"
             : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                             : python_float_repr(f);
      return;
    }
    case Value::Kind::kString:
      json_string(v.as_string(), out);
      return;
    case Value::Kind::kList: {
      const List& list = v.as_list();
      if (list.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < list.size(); ++k) {
        if (k) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        json_value(list[k], indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      const Dict& dict = v.as_dict();
      if (dict.items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, e] : dict.items) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        json_string(k, out);
        out += ": ";
        json_value(e, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    default:
      throw std::invalid_argument("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& value, int indent) {
  std::string out;
  json_value(value, indent, 0, out);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t k = 0; k < s.size(); ++k) {
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) offsets.push_back(k);
  }
  offsets.push_back(s.size());
  return offsets;
}

}  // namespace crl::jinja
