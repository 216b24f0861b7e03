#pragma once
// The values a chat template computes with, modelled on the Python objects jinja2 sees when Hugging Face
// renders a template: undefined (jinja2's default Undefined), None, bool, int, float, str, list (tuples too),
// dict (insertion-ordered, string keys, as JSON objects are), a namespace() object, and callables (macros,
// globals, bound methods). Lists and strings are immutable and shared; a namespace is the one mutable value
// (`{% set ns.x = ... %}`), shared by reference as in Python.
//
// Strings are UTF-8; lengths, indices and slices count code points, as Python's str does.
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace crl::jinja {

class Value;
class Interpreter;
using List = std::vector<Value>;

// An insertion-ordered mapping with string keys (linear lookup: template dicts are small).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  const Value* named_arg(std::string_view name) const;
};

// Something a template can call: a macro, a global (range, namespace, raise_exception, ...), a method bound
// to its object. `call` throws TemplateError for bad arguments.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string name() const = 0;
  virtual Value call(const CallArgs& args, Interpreter& interpreter) const = 0;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;                         // undefined
  static Value undefined(std::string hint);  // hint: what was looked up, for the error if it is used
  static Value none();
  Value(bool b);  // NOLINT: values convert implicitly, as in the template language
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double f);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  Value(List list);
  Value(Dict dict);
  static Value make_namespace(Dict attributes);
  static Value callable(std::shared_ptr<const Callable> c);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *static_cast<const std::string*>(p_.get()); }
  const std::string& undefined_hint() const { return *static_cast<const std::string*>(p_.get()); }
  const List& as_list() const { return *static_cast<const List*>(p_.get()); }
  // A dict or a namespace's attributes.
  const Dict& as_dict() const { return *static_cast<const Dict*>(p_.get()); }
  // Mutable: set ns.x = ... (a namespace is the one value shared by reference).
  Dict& namespace_attributes() const { return *const_cast<Dict*>(static_cast<const Dict*>(p_.get())); }
  const Callable& as_callable() const { return *static_cast<const Callable*>(p_.get()); }

  // The string to append to in place when this value is a string that nothing else shares (a concatenation
  // chain `a + b + c` then copies the text once, not once per `+`); null otherwise.
  std::string* unique_string();

  // A dict value sharing `dict` (the interpreter reuses its loop variable's dict when nothing else holds it:
  // copy on write, see Interpreter::exec_for).
  static Value shared_dict(std::shared_ptr<Dict> dict);

  // Lists and dicts nested in this value (0 for a scalar; a namespace counts 1: it can change later).
  uint32_t depth() const { return depth_; }

  // Python's bool(): empty strings, lists and dicts, zero, None and undefined are false.
  bool truthy() const;
  // Python's str() (jinja2's {{ value }}): None -> "None", True -> "True", 1.0 -> "1.0", lists and dicts as
  // their repr; undefined -> "".
  std::string str() const;
  // Python's repr().
  std::string repr() const;
  // The type name in error messages ("str", "list", "dict", ...).
  std::string type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  uint32_t depth_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  // The one heap part, by kind: a std::string (a string, or the hint of an undefined value), a List, a Dict
  // (dicts and namespaces) or a Callable. One shared pointer rather than one per kind: values are copied
  // at every name lookup and attribute access, and a value is 40 bytes instead of 96.
  std::shared_ptr<const void> p_;
};

// repr(), str(), ==, to_json recurse into values: past this many levels (a namespace holding itself) they
// throw std::length_error, which the interpreter reports as a kLimit error.
constexpr int kMaxValueDepth = 256;

// Python's ==: 1 == 1.0 == True, lists element-wise, dicts regardless of order, undefined == undefined.
bool equal(const Value& a, const Value& b);

// Python's float.__repr__ (shortest round trip: 1.0, 0.1, 1e+20, 1e-05, inf, nan).
std::string python_float_repr(double f);

// A JSON document as template values (objects keep their key order) and back.
Value from_json(const nlohmann::json& j);
// The same from a JSON value that keeps its keys in insertion order (what Python's json gives templates):
// dicts keep that order, so `tojson` and `items()` write the keys as the request wrote them.
Value from_json(const nlohmann::ordered_json& j);

// Hugging Face's tojson filter: json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=False), so
// ", " and ": " separators without indent, "," and ": " with one; non-ASCII text stays as it is. Throws
// std::invalid_argument naming the value that is not JSON (undefined, a macro).
std::string to_json(const Value& value, int indent = -1);

// UTF-8 code points: count, and the byte offset of the code point at index `cp` (or the size).
size_t utf8_length(std::string_view s);
std::vector<size_t> utf8_offsets(std::string_view s);  // byte offset of each code point, then s.size()

}  // namespace crl::jinja
