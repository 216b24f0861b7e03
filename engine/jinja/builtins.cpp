#include "engine/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <stdexcept>
#include <string_view>

#include "engine/jinja/string_methods.h"

namespace crl::jinja {

namespace {

// (string_views: a lookup compares lengths first, where a const char* cost a strlen per name per
// attribute read, and `message.role` is most of a chat template's reads.)
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};
constexpr std::string_view kStringMethods[] = {
    "strip",   "lstrip",  "rstrip",     "split",   "startswith", "endswith", "upper", "lower",
    "title",   "replace", "capitalize", "find",    "rfind",      "count",    "join",  "isdigit",
    "isalpha", "isspace", "isupper",    "islower", "splitlines", "rsplit"};

template <size_t N>
bool one_of(const std::string& name, const std::string_view (&names)[N]) {
  return std::any_of(std::begin(names), std::end(names), [&](std::string_view n) { return name == n; });
}

// A method bound to its object: "abc".upper, message.get.
class Method final : public Callable {
 public:
  Method(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string name() const override { return "built-in method " + name_ + " of " + self_.type_name(); }
  Value call(const CallArgs& args, Interpreter& in) const override {
    if (self_.is_string()) return call_string_method(in, self_.as_string(), name_, args);
    const Dict& d = self_.as_dict();
    if (name_ == "items") {
      List out;
      for (const auto& [k, v] : d.items) out.push_back(Value(List{Value(k), v}));
      return Value(std::move(out));
    }
    if (name_ == "keys" || name_ == "values") {
      List out;
      for (const auto& [k, v] : d.items) out.push_back(name_ == "keys" ? Value(k) : v);
      return Value(std::move(out));
    }
    // get(key, default=None)
    if (args.positional.empty()) in.fail(ErrorKind::kType, "get expected at least 1 argument, got 0");
    const Value& key = args.positional[0];
    if (key.is_string()) {
      if (const Value* v = d.find(key.as_string())) return *v;
    }
    return args.positional.size() > 1 ? args.positional[1] : Value::none();
  }

 private:
  Value self_;
  std::string name_;
};

// A global function: range, namespace, dict, raise_exception, strftime_now.
class Global final : public Callable {
 public:
  explicit Global(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return "function " + name_; }
  Value call(const CallArgs& args, Interpreter& in) const override {
    if (name_ == "raise_exception") {
      const std::string message = args.positional.empty() ? "" : args.positional[0].str();
      in.fail(ErrorKind::kRaised, message);
    }
    if (name_ == "namespace" || name_ == "dict") {
      Dict d;
      for (const Value& p : args.positional) {
        if (!p.is_dict()) in.fail(ErrorKind::kType, name_ + "() takes a dict or keyword arguments");
        for (const auto& [k, v] : p.as_dict().items) d.set(k, v);
      }
      for (const auto& [k, v] : args.named) d.set(k, v);
      if (name_ == "dict") return Value(std::move(d));
      Value made = Value::make_namespace(std::move(d));
      in.adopt_namespace(made);
      return made;
    }
    if (name_ == "strftime_now") {
      if (args.positional.empty() || !args.positional[0].is_string())
        in.fail(ErrorKind::kType, "strftime_now(format) needs a format string");
      const std::time_t t = static_cast<std::time_t>(in.now_unix());
      std::tm tm{};
      gmtime_r(&t, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, args.positional[0].as_string().c_str(), &tm);
      return Value(std::string(buf, n));
    }
    // range([start,] stop[, step])
    int64_t start = 0, stop = 0, step = 1;
    for (const Value& a : args.positional) {
      if (!a.is_int() && !a.is_bool())
        in.fail(ErrorKind::kType, "range() takes integers, not " + a.type_name());
    }
    const auto& p = args.positional;
    if (p.size() == 1) {
      stop = p[0].as_int();
    } else if (p.size() == 2 || p.size() == 3) {
      start = p[0].as_int();
      stop = p[1].as_int();
      if (p.size() == 3) step = p[2].as_int();
    } else {
      in.fail(ErrorKind::kType, "range expected 1 to 3 arguments");
    }
    if (step == 0) in.fail(ErrorKind::kType, "range() arg 3 must not be zero");
    const long double count_ld =
        step > 0 ? (stop > start ? std::ceil((static_cast<long double>(stop) - start) / step) : 0)
                 : (stop < start ? std::ceil((static_cast<long double>(start) - stop) / -step) : 0);
    if (count_ld > static_cast<long double>(in.limits().max_loop_iterations))
      in.count_iterations(in.limits().max_loop_iterations + 1);
    const int64_t count = static_cast<int64_t>(count_ld);
    in.count_iterations(static_cast<uint64_t>(count));
    in.check_size(static_cast<size_t>(count), "list");  // the list is built whole
    List out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) out.push_back(Value(start + k * step));
    return Value(std::move(out));
  }

 private:
  std::string name_;
};

int64_t normalize_index(int64_t i, int64_t n) {
  return i < 0 ? i + n : i;
}

}  // namespace

List iterate(Interpreter& in, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, e] : v.as_dict().items) keys.push_back(Value(k));
      return keys;
    }
    case Value::Kind::kString: {
      const std::string& s = v.as_string();
      const std::vector<size_t> at = utf8_offsets(s);
      List chars;
      for (size_t k = 0; k + 1 < at.size(); ++k) chars.push_back(Value(s.substr(at[k], at[k + 1] - at[k])));
      return chars;
    }
    default:
      in.fail(ErrorKind::kType, "'" + v.type_name() + "' object is not iterable");
  }
}

Value get_attribute(Interpreter& in, const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      in.fail(ErrorKind::kUndefined, obj.undefined_hint());
    case Value::Kind::kDict:
      if (one_of(name, kDictMethods)) return Value::callable(std::make_shared<Method>(obj, name));
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    case Value::Kind::kNamespace:
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return Value::undefined("'Namespace' object has no attribute '" + name + "'");
    case Value::Kind::kString:
      if (one_of(name, kStringMethods)) return Value::callable(std::make_shared<Method>(obj, name));
      return Value::undefined("'str object' has no attribute '" + name + "'");
    default:
      return Value::undefined("'" + obj.repr() + "' has no attribute '" + name + "'");
  }
}

Value get_item(Interpreter& in, const Value& obj, const Value& key) {
  if (obj.is_undefined()) in.fail(ErrorKind::kUndefined, obj.undefined_hint());
  if (obj.is_dict() || obj.is_namespace()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      return get_attribute(in, obj, key.as_string());
    }
    return Value::undefined("'dict object' has no attribute " + key.repr());
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    if (obj.is_list()) {
      const List& list = obj.as_list();
      const int64_t i = normalize_index(key.as_int(), static_cast<int64_t>(list.size()));
      if (i < 0 || i >= static_cast<int64_t>(list.size()))
        return Value::undefined("list object has no element " + key.repr());
      return list[static_cast<size_t>(i)];
    }
    const std::string& s = obj.as_string();
    const std::vector<size_t> at = utf8_offsets(s);
    const int64_t n = static_cast<int64_t>(at.size()) - 1;
    const int64_t i = normalize_index(key.as_int(), n);
    if (i < 0 || i >= n) return Value::undefined("str object has no element " + key.repr());
    return Value(
        s.substr(at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1] - at[static_cast<size_t>(i)]));
  }
  if (key.is_string()) return get_attribute(in, obj, key.as_string());
  return Value::undefined("'" + obj.type_name() + "' object has no element " + key.repr());
}

Value get_slice(Interpreter& in, const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) in.fail(ErrorKind::kUndefined, obj.undefined_hint());
  if (!obj.is_list() && !obj.is_string()) in.fail(ErrorKind::kType, "cannot slice a " + obj.type_name());
  const auto as_int = [&](const Value* v, int64_t fallback) {
    if (!v || v->is_none()) return fallback;
    if (!v->is_int() && !v->is_bool()) in.fail(ErrorKind::kType, "slice indices must be integers or None");
    return v->as_int();
  };
  const bool is_list = obj.is_list();
  const std::vector<size_t> at = is_list ? std::vector<size_t>{} : utf8_offsets(obj.as_string());
  const int64_t n =
      is_list ? static_cast<int64_t>(obj.as_list().size()) : static_cast<int64_t>(at.size()) - 1;
  const int64_t st = as_int(step, 1);
  if (st == 0) in.fail(ErrorKind::kType, "slice step cannot be zero");
  // Python's PySlice_AdjustIndices.
  const auto adjust = [&](const Value* v, int64_t fallback) {
    if (!v || v->is_none()) return fallback;
    int64_t i = as_int(v, 0);
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t b = adjust(start, st < 0 ? n - 1 : 0);
  const int64_t e = adjust(stop, st < 0 ? -1 : n);
  List items;
  std::string text;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (is_list) {
      items.push_back(obj.as_list()[static_cast<size_t>(i)]);
    } else {
      text.append(obj.as_string(), at[static_cast<size_t>(i)],
                  at[static_cast<size_t>(i) + 1] - at[static_cast<size_t>(i)]);
    }
  }
  return is_list ? Value(std::move(items)) : Value(std::move(text));
}

bool contains(Interpreter& in, const Value& container, const Value& needle) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!needle.is_string())
        in.fail(ErrorKind::kType, "'in <string>' requires string as left operand, not " + needle.type_name());
      return container.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList:
      return std::any_of(container.as_list().begin(), container.as_list().end(),
                         [&](const Value& v) { return equal(v, needle); });
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      return needle.is_string() && container.as_dict().find(needle.as_string()) != nullptr;
    default:
      in.fail(ErrorKind::kType, "argument of type '" + container.type_name() + "' is not iterable");
  }
}

bool less(Interpreter& in, const Value& a, const Value& b) {
  if (a.is_undefined()) in.fail(ErrorKind::kUndefined, a.undefined_hint());
  if (b.is_undefined()) in.fail(ErrorKind::kUndefined, b.undefined_hint());
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!equal(x[k], y[k])) return less(in, x[k], y[k]);
    }
    return x.size() < y.size();
  }
  in.fail(ErrorKind::kType,
          "'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

Dict builtin_globals() {
  Dict d;
  for (const char* name : {"range", "namespace", "dict", "raise_exception", "strftime_now"})
    d.set(name, Value::callable(std::make_shared<Global>(name)));
  return d;
}

}  // namespace crl::jinja
