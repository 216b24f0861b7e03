#include "wire/wire_codec.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <google/protobuf/unknown_field_set.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/json_escape.h"
#include "engine/json_reader.h"
#include "engine/proto_bytes.h"
#include "wire/api_error.h"
#include "wire/utf8.h"

namespace crl::wire {

namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using nlohmann::json;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The media type of a header value, lower-cased, without parameters.
std::string media_type(std::string_view value) {
  value = trim(value.substr(0, value.find(';')));
  std::string out(value);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// ---- JSON -> message
// --------------------------------------------------------------------------------------- The canonical
// proto3 JSON mapping for the types the schema uses (messages, repeated fields, maps, scalars, enums; no
// well-known types, no bytes): integers as numbers or decimal strings (64-bit ones are printed as strings),
// floats as numbers or "NaN" / "Infinity" / "-Infinity", null as the default. Field names are the .proto
// names or their lowerCamelCase JSON names. Anything else is an error naming the field path.

std::string kind_of(const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    default:
      return "null";
  }
}

// Where a value sits in the request ("steps[3].action.kind"), as a chain on the stack: the text is built
// only when an error names it (building it for every field and array element cost more than the reading).
struct FieldPath {
  const FieldPath* parent = nullptr;
  std::string_view key;  // a field name or map key; empty for an array element or the root
  int64_t index = -1;    // the array index, or -1

  std::string str() const {
    std::string base = parent ? parent->str() : std::string();
    if (index >= 0) return base + "[" + std::to_string(index) + "]";
    if (key.empty()) return base;
    const std::string shown = text_prefix(key, 60);  // a key is the client's, of any length
    return base.empty() ? shown : base + "." + shown;
  }
};

[[noreturn]] void bad(const FieldPath& where, const std::string& expected, const json& value) {
  const std::string path = where.str();
  // A short prefix only: the value is the client's, of any size (dumping it whole cost memory and time).
  const std::string shown = json_preview(value, 80);
  throw ApiError(400, "bad_field",
                 path + ": expected " + expected + ", found " + kind_of(value) + " " + shown, path);
}

// An integer of the field's type, from a JSON number or decimal string.
template <typename T>
[[noreturn]] void bad_integer(const json& value, const FieldPath& path) {
  bad(path,
      "an integer in " + std::to_string(std::numeric_limits<T>::min()) + " .. " +
          std::to_string(std::numeric_limits<T>::max()),
      value);
}

// An integer of the field's type, from a JSON number or decimal string.
template <typename T>
T read_integer(const json& value, const FieldPath& path) {
  constexpr bool is_signed = std::numeric_limits<T>::is_signed;
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) bad_integer<T>(value, path);
    return static_cast<T>(v);
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if constexpr (is_signed) {
      if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          v > static_cast<int64_t>(std::numeric_limits<T>::max())) {
        bad_integer<T>(value, path);
      }
    } else if (v < 0 || static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      bad_integer<T>(value, path);
    }
    return static_cast<T>(v);
  }
  if (value.is_number_float()) {  // 3.0 is an integer; 3.5 and 1e30 are not
    const double d = value.get<double>();
    if (!(std::floor(d) == d) || d < static_cast<double>(std::numeric_limits<T>::min()) ||
        d >= std::ldexp(1.0, std::numeric_limits<T>::digits)) {
      bad_integer<T>(value, path);
    }
    return static_cast<T>(d);
  }
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    T v{};
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) bad_integer<T>(value, path);
    return v;
  }
  bad_integer<T>(value, path);
}

template <typename T>
T read_float(const json& value, const FieldPath& path) {
  if (value.is_number()) {
    const double d = value.get<double>();
    if (std::isfinite(d) && std::fabs(d) > static_cast<double>(std::numeric_limits<T>::max())) {
      bad(path, "a number in the range of its type", value);
    }
    return static_cast<T>(d);
  }
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    if (s == "NaN") return std::numeric_limits<T>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<T>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<T>::infinity();
    double d = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty() && std::isfinite(d) &&
        std::fabs(d) <= static_cast<double>(std::numeric_limits<T>::max())) {
      return static_cast<T>(d);
    }
  }
  bad(path, "a number (or \"NaN\", \"Infinity\", \"-Infinity\")", value);
}

const EnumValueDescriptor* read_enum(const json& value, const FieldDescriptor* field, const FieldPath& path) {
  const auto* type = field->enum_type();
  const EnumValueDescriptor* found = nullptr;
  if (value.is_string()) found = type->FindValueByName(value.get_ref<const std::string&>());
  if (value.is_number_integer()) {
    const int64_t n = value.get<int64_t>();
    if (n >= std::numeric_limits<int32_t>::min() && n <= std::numeric_limits<int32_t>::max()) {
      found = type->FindValueByNumber(static_cast<int>(n));
    }
  }
  if (found == nullptr) bad(path, "a value of enum " + std::string(type->name()), value);
  return found;
}

void read_message(const json& value, Message& message, const FieldPath& path);

// Sets (or, for repeated fields, adds) one scalar or message value.
void read_value(const json& value, Message& message, const FieldDescriptor* field, const FieldPath& path) {
  const Reflection* r = message.GetReflection();
  const bool rep = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      const auto v = read_integer<int32_t>(value, path);
      rep ? r->AddInt32(&message, field, v) : r->SetInt32(&message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      const auto v = read_integer<int64_t>(value, path);
      rep ? r->AddInt64(&message, field, v) : r->SetInt64(&message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      const auto v = read_integer<uint32_t>(value, path);
      rep ? r->AddUInt32(&message, field, v) : r->SetUInt32(&message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      const auto v = read_integer<uint64_t>(value, path);
      rep ? r->AddUInt64(&message, field, v) : r->SetUInt64(&message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      const auto v = read_float<float>(value, path);
      rep ? r->AddFloat(&message, field, v) : r->SetFloat(&message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      const auto v = read_float<double>(value, path);
      rep ? r->AddDouble(&message, field, v) : r->SetDouble(&message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      if (!value.is_boolean()) bad(path, "true or false", value);
      rep ? r->AddBool(&message, field, value.get<bool>()) : r->SetBool(&message, field, value.get<bool>());
      break;
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumValueDescriptor* v = read_enum(value, field, path);
      rep ? r->AddEnum(&message, field, v) : r->SetEnum(&message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      if (field->type() == FieldDescriptor::TYPE_BYTES)
        bad(path, "no bytes field (not in this schema)", value);
      if (!value.is_string()) bad(path, "a string", value);
      rep ? r->AddString(&message, field, value.get<std::string>())
          : r->SetString(&message, field, value.get<std::string>());
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      Message* child = rep ? r->AddMessage(&message, field) : r->MutableMessage(&message, field);
      read_message(value, *child, path);
      break;
    }
  }
}

void read_message(const json& value, Message& message, const FieldPath& path) {
  const Descriptor* type = message.GetDescriptor();
  if (!value.is_object()) bad(path, "an object (" + std::string(type->name()) + ")", value);
  // A field named twice (by its .proto name and its JSON name) is a duplicate key like any other.
  uint64_t seen_small = 0;
  std::vector<bool> seen_large(type->field_count() > 64 ? type->field_count() : 0);
  for (const auto& [key, item] : value.items()) {
    const FieldDescriptor* field = type->FindFieldByName(key);
    if (field == nullptr) field = type->FindFieldByCamelcaseName(key);
    const FieldPath at{&path, key};
    if (field == nullptr) {
      std::string known;
      for (int i = 0; i < type->field_count(); ++i) known += (i ? ", " : "") + type->field(i)->name();
      throw ApiError(400, "unknown_field",
                     "unknown field \"" + text_prefix(key, 60) + "\" (known: " + known + ")", at.str());
    }
    const int index = field->index();
    const bool repeated_key =
        index < 64 ? (seen_small >> index) & 1 : static_cast<bool>(seen_large[static_cast<size_t>(index)]);
    if (repeated_key) {
      throw ApiError(400, "duplicate_key",
                     "field " + at.str() + " is given twice (as \"" + field->name() + "\" and \"" +
                         field->json_name() + "\")",
                     at.str());
    }
    if (index < 64) {
      seen_small |= uint64_t{1} << index;
    } else {
      seen_large[static_cast<size_t>(index)] = true;
    }
    if (item.is_null()) continue;  // null reads as the default
    if (field->is_map()) {
      if (!item.is_object()) bad(at, "an object (a map)", item);
      const FieldDescriptor* key_field = field->message_type()->map_key();
      const FieldDescriptor* value_field = field->message_type()->map_value();
      for (const auto& [k, v] : item.items()) {
        Message* entry = message.GetReflection()->AddMessage(&message, field);
        const FieldPath entry_path{&at, k};
        read_value(json(k), *entry, key_field, entry_path);  // keys are strings in JSON
        if (!v.is_null()) read_value(v, *entry, value_field, entry_path);
      }
    } else if (field->is_repeated()) {
      if (!item.is_array()) bad(at, "an array", item);
      for (size_t i = 0; i < item.size(); ++i) {
        const FieldPath element{&at, {}, static_cast<int64_t>(i)};
        if (item[i].is_null()) bad(element, "a value (null is not allowed in an array)", item[i]);
        read_value(item[i], message, field, element);
      }
    } else {
      read_value(item, message, field, at);
    }
  }
}

// ---- message -> JSON
// --------------------------------------------------------------------------------------- Every field in
// declaration order, defaults too (scalars, empty lists and maps); message fields and proto3 optional fields
// only when set; 64-bit integers as strings; map entries sorted by key. Floats use the shortest text that
// reads back to the same value.

void write_string(std::string& out, std::string_view s) {
  std::string repaired;
  for (unsigned char c : s) {
    if (c >= 0x80) {
      if (!is_valid_utf8(s)) {
        repaired = valid_utf8(s);
        s = repaired;
      }
      break;
    }
  }
  append_json_string(out, s);
}

// The longest text put_number writes: a double's shortest form is at most 24 characters, quotes add two.
constexpr size_t kMaxNumberText = 32;

// Writes a number's JSON text at `at` (room for kMaxNumberText) and returns its end.
template <typename T>
char* put_number(char* at, T value, bool quoted) {
  if constexpr (std::is_floating_point_v<T>) {
    const auto put = [&](std::string_view text) { return std::copy(text.begin(), text.end(), at); };
    if (std::isnan(value)) return put("\"NaN\"");
    if (std::isinf(value)) return put(value > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    // -0.0 as "-0.0", not the shortest form's "-0": a JSON reader (ours, nlohmann's, Python's) reads "-0" as
    // the integer 0, so a message read back and written again lost the sign (a fuzz finding; the bits of a
    // float are what the state hash and the export carry).
    if (value == 0 && std::signbit(value)) return put(quoted ? "\"-0.0\"" : "-0.0");
  }
  if (quoted) *at++ = '"';
  at = std::to_chars(at, at + kMaxNumberText - 2, value).ptr;
  if (quoted) *at++ = '"';
  return at;
}

template <typename T>
void write_number(std::string& out, T value, bool quoted) {
  char buffer[kMaxNumberText];
  out.append(buffer, put_number(buffer, value, quoted));
}

void write_message(std::string& out, const Message& message);

// An enum value by its name; a number the schema does not name (proto3 enums are open: a newer peer's value
// survives parsing) as the number, as the canonical JSON mapping prints it.
void write_enum(std::string& out, const FieldDescriptor* f, int32_t number) {
  const EnumValueDescriptor* value = f->enum_type()->FindValueByNumber(number);
  if (value != nullptr) return write_string(out, value->name());
  write_number(out, number, false);
}

void write_value(std::string& out, const Message& m, const FieldDescriptor* f, int index) {
  const Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return write_number(out, rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f), false);
    case FieldDescriptor::CPPTYPE_INT64:
      return write_number(out, rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f), true);
    case FieldDescriptor::CPPTYPE_UINT32:
      return write_number(out, rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f), false);
    case FieldDescriptor::CPPTYPE_UINT64:
      return write_number(out, rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f), true);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return write_number(out, rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f), false);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return write_number(out, rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f), false);
    case FieldDescriptor::CPPTYPE_BOOL:
      out += (rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false";
      return;
    case FieldDescriptor::CPPTYPE_ENUM:
      return write_enum(out, f, rep ? r->GetRepeatedEnumValue(m, f, index) : r->GetEnumValue(m, f));
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string scratch;
      const std::string& s =
          rep ? r->GetRepeatedStringReference(m, f, index, &scratch) : r->GetStringReference(m, f, &scratch);
      return write_string(out, s);
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return write_message(out, rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f));
  }
}

// Text bound for `out` gathered in a buffer on the stack and appended a few KB at a time: a repeated field's
// elements are a few bytes each, and an append per element cost more than writing them.
class ChunkedText {
 public:
  explicit ChunkedText(std::string& out) : out_(out) {}
  ChunkedText(const ChunkedText&) = delete;
  ChunkedText& operator=(const ChunkedText&) = delete;
  ~ChunkedText() { flush(); }
  // Where to write up to `n` (<= sizeof the buffer) characters; then done(end of what was written).
  char* room(size_t n) {
    if (static_cast<size_t>(std::end(chunk_) - at_) < n) flush();
    return at_;
  }
  void done(char* end) { at_ = end; }
  void put(std::string_view text) {
    if (text.size() > sizeof(chunk_)) {
      flush();
      out_ += text;
      return;
    }
    done(std::copy(text.begin(), text.end(), room(text.size())));
  }
  void flush() {
    out_.append(chunk_, at_);
    at_ = chunk_;
  }

 private:
  std::string& out_;
  char chunk_[4096];
  char* at_ = chunk_;
};

// A repeated number or enum field's elements, contiguous. Reflection's RepeatedFieldRef costs a virtual call
// per element (30% of an export's instructions, callgrind); protobuf deprecates this direct accessor in
// favour of it but still ships it (Debian 12's 3.21 included), so it is used here, in this one place. Its
// comment leaves enums out, but an enum field is stored as RepeatedField<int32_t> and the accessor accepts
// it as such (the same exception RepeatedFieldRef<int32_t> makes); a protobuf that refused it would abort in
// WireCodec's enum tests, not misread.
template <typename T>
const google::protobuf::RepeatedField<T>& repeated_field(const Message& m, const FieldDescriptor* f) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  return m.GetReflection()->GetRepeatedField<T>(m, f);
#pragma GCC diagnostic pop
}

template <typename T>
void write_numbers(std::string& out, const Message& m, const FieldDescriptor* f, bool quoted) {
  bool first = true;
  ChunkedText text(out);
  for (const T value : repeated_field<T>(m, f)) {
    char* at = text.room(kMaxNumberText + 1);
    if (!first) *at++ = ',';
    first = false;
    text.done(put_number(at, value, quoted));
  }
}

// The elements of a repeated number or enum field, comma-separated, read from the field's array: a session's
// export is tens of thousands of them, and reflection's per-index getters (GetRepeatedInt32, ...) look the
// field's offset up again for every element. False for the other types (booleans, strings, messages), which
// the caller writes one by one.
bool write_repeated_scalars(std::string& out, const Message& m, const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return write_numbers<int32_t>(out, m, f, false), true;
    case FieldDescriptor::CPPTYPE_INT64:
      return write_numbers<int64_t>(out, m, f, true), true;
    case FieldDescriptor::CPPTYPE_UINT32:
      return write_numbers<uint32_t>(out, m, f, false), true;
    case FieldDescriptor::CPPTYPE_UINT64:
      return write_numbers<uint64_t>(out, m, f, true), true;
    case FieldDescriptor::CPPTYPE_FLOAT:
      return write_numbers<float>(out, m, f, false), true;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return write_numbers<double>(out, m, f, false), true;
    case FieldDescriptor::CPPTYPE_ENUM: {
      // Each value's text (",NAME") is made once per field for the small numbers a schema uses; any other
      // number (unnamed, or large) is made when met.
      std::vector<std::string> texts;
      std::string other;
      bool first = true;
      ChunkedText text(out);
      for (const int32_t number : repeated_field<int32_t>(m, f)) {
        std::string* value_text = &other;
        if (number >= 0 && number < 64) {
          if (static_cast<size_t>(number) >= texts.size()) texts.resize(static_cast<size_t>(number) + 1);
          value_text = &texts[static_cast<size_t>(number)];
        }
        if (value_text == &other || value_text->empty()) {
          *value_text = ",";
          write_enum(*value_text, f, number);
        }
        text.put(std::string_view(*value_text).substr(first ? 1 : 0));
        first = false;
      }
      return true;
    }
    default:
      return false;
  }
}

void write_message(std::string& out, const Message& message) {
  const Descriptor* type = message.GetDescriptor();
  const Reflection* r = message.GetReflection();
  out += '{';
  bool first = true;
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* f = type->field(i);
    if (!f->is_repeated() && f->has_presence() && !r->HasField(message, f)) continue;
    if (!first) out += ',';
    first = false;
    write_string(out, f->name());
    out += ':';
    if (f->is_map()) {
      const FieldDescriptor* key = f->message_type()->map_key();
      const FieldDescriptor* value = f->message_type()->map_value();
      const int n = r->FieldSize(message, f);
      std::vector<std::pair<std::string, const Message*>> entries;
      entries.reserve(n);
      for (int e = 0; e < n; ++e) {
        const Message& entry = r->GetRepeatedMessage(message, f, e);
        std::string k;
        if (key->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
          k = entry.GetReflection()->GetString(entry, key);
        } else {
          std::string number;
          write_value(number, entry, key, -1);
          k = number.front() == '"' ? number.substr(1, number.size() - 2) : number;
        }
        entries.emplace_back(std::move(k), &entry);
      }
      std::sort(entries.begin(), entries.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t e = 0; e < entries.size(); ++e) {
        if (e) out += ',';
        write_string(out, entries[e].first);
        out += ':';
        write_value(out, *entries[e].second, value, -1);
      }
      out += '}';
    } else if (f->is_repeated()) {
      out += '[';
      if (!write_repeated_scalars(out, message, f)) {
        const int n = r->FieldSize(message, f);
        for (int e = 0; e < n; ++e) {
          if (e) out += ',';
          write_value(out, message, f, e);
        }
      }
      out += ']';
    } else {
      write_value(out, message, f, -1);
    }
  }
  out += '}';
}

// ---- binary
// ------------------------------------------------------------------------------------------------

// Rejects fields that binary parsing kept as unknown: an unknown number, or a known number sent with the
// wrong wire type (protobuf cannot tell the two apart, so both are named here).
void check_no_unknown_fields(const Message& message, const FieldPath& path) {
  const Reflection* reflection = message.GetReflection();
  const auto& unknown = reflection->GetUnknownFields(message);
  if (!unknown.empty()) {
    const int number = unknown.field(0).number();
    const FieldDescriptor* known = message.GetDescriptor()->FindFieldByNumber(number);
    if (known != nullptr) {
      const std::string at = FieldPath{&path, known->name()}.str();
      throw ApiError(400, "bad_field",
                     "field " + at + " (number " + std::to_string(number) + ") has the wrong wire type", at);
    }
    const std::string name = "#" + std::to_string(number);
    throw ApiError(
        400, "unknown_field",
        "unknown field number " + std::to_string(number) + " in " + message.GetDescriptor()->name(),
        FieldPath{&path, name}.str());
  }
  // Only message-typed fields can hold more unknown fields: visit those that are set (without listing the
  // scalar fields, which cost more than the check when done for every request).
  const Descriptor* type = message.GetDescriptor();
  for (int f = 0; f < type->field_count(); ++f) {
    const FieldDescriptor* field = type->field(f);
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const FieldPath at{&path, field->name()};
    if (field->is_repeated()) {
      const int n = reflection->FieldSize(message, field);
      for (int i = 0; i < n; ++i) {
        check_no_unknown_fields(reflection->GetRepeatedMessage(message, field, i), FieldPath{&at, {}, i});
      }
    } else if (reflection->HasField(message, field)) {
      check_no_unknown_fields(reflection->GetMessage(message, field), at);
    }
  }
}

}  // namespace

WireFormat format_from_content_type(std::string_view value) {
  const std::string type = media_type(value);
  // curl -d sends application/x-www-form-urlencoded; text/plain comes from minimal clients: both are read as
  // JSON, the default encoding.
  if (type.empty() || type == kJsonContentType || type == "text/plain" ||
      type == "application/x-www-form-urlencoded") {
    return WireFormat::kJson;
  }
  if (type == kProtobufContentType || type == "application/protobuf" || type == "application/octet-stream") {
    return WireFormat::kProtobuf;
  }
  throw ApiError(415, "unsupported_media_type",
                 "Content-Type \"" + type + "\" is not application/json or application/x-protobuf",
                 "Content-Type");
}

WireFormat response_format(std::string_view accept, WireFormat request_format) {
  const std::string type = media_type(accept);
  if (type == kJsonContentType) return WireFormat::kJson;
  if (type == kProtobufContentType || type == "application/protobuf") return WireFormat::kProtobuf;
  return request_format;
}

std::string_view content_type(WireFormat format) {
  return format == WireFormat::kJson ? kJsonContentType : kProtobufContentType;
}

void decode_message(std::string_view body, WireFormat format, Message& out) {
  out.Clear();
  if (format == WireFormat::kProtobuf) {
    if (!out.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      throw ApiError(400, "bad_protobuf",
                     "the body (" + std::to_string(body.size()) + " bytes) is not a valid binary " +
                         out.GetDescriptor()->name() + " message");
    }
    check_no_unknown_fields(out, FieldPath{});
    return;
  }
  if (trim(body).empty()) return;
  // The shared reader bounds the nesting depth (kMaxJsonDepth) and refuses duplicate keys before a DOM
  // exists; its errors become 400s with their own codes (bad_json | json_too_deep | duplicate_key).
  json document;
  try {
    document = read_json(body, "the body");
  } catch (const JsonError& e) {
    throw ApiError(400, std::string(e.code()), "the body: " + e.message(), e.field());
  }
  try {
    read_message(document, out, FieldPath{});
  } catch (...) {
    out.Clear();
    throw;
  }
}

std::string encode_message(const Message& message, WireFormat format) {
  if (format == WireFormat::kProtobuf) return deterministic_bytes(message);
  std::string out;
  out.reserve(256);
  write_message(out, message);
  return out;
}

}  // namespace crl::wire
