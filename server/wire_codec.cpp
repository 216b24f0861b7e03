#include "server/wire_codec.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/type_resolver_util.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace crl::server {

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using nlohmann::json;

constexpr const char* kTypeUrlPrefix = "type.googleapis.com";

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

// A problem found in a JSON document that protobuf's parser rejected.
struct Finding {
  std::string code;
  std::string field;
  std::string message;
};

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

// Range of an integer field type, as doubles (exact enough to classify JSON numbers).
void int_range(FieldDescriptor::CppType type, long double& lo, long double& hi) {
  switch (type) {
    case FieldDescriptor::CPPTYPE_INT32:
      lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      lo = 0, hi = std::numeric_limits<uint32_t>::max();
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      lo = static_cast<long double>(std::numeric_limits<int64_t>::min());
      hi = static_cast<long double>(std::numeric_limits<int64_t>::max());
      break;
    default:
      lo = 0, hi = static_cast<long double>(std::numeric_limits<uint64_t>::max());
      break;
  }
}

bool check_value(const json& value, const FieldDescriptor* field, const std::string& path, Finding& out);

bool check_object(const json& value, const Descriptor* type, const std::string& path, Finding& out) {
  if (!value.is_object()) {
    out = {"bad_field", path,
           "expected an object (" + std::string(type->name()) + "), found " + kind_of(value)};
    return true;
  }
  for (const auto& [key, item] : value.items()) {
    const FieldDescriptor* field = type->FindFieldByName(key);
    if (field == nullptr) field = type->FindFieldByCamelcaseName(key);
    const std::string at = path.empty() ? key : path + "." + key;
    if (field == nullptr) {
      std::string known;
      for (int i = 0; i < type->field_count(); ++i) known += (i ? ", " : "") + type->field(i)->name();
      out = {"unknown_field", at, "unknown field \"" + key + "\" (known: " + known + ")"};
      return true;
    }
    if (item.is_null()) continue;  // null reads as the default
    if (field->is_map()) {
      if (!item.is_object()) {
        out = {"bad_field", at, "expected an object (a map), found " + kind_of(item)};
        return true;
      }
      const FieldDescriptor* mapped = field->message_type()->FindFieldByName("value");
      for (const auto& [k, v] : item.items()) {
        if (check_value(v, mapped, at + "." + k, out)) return true;
      }
    } else if (field->is_repeated()) {
      if (!item.is_array()) {
        out = {"bad_field", at, "expected an array, found " + kind_of(item)};
        return true;
      }
      for (size_t i = 0; i < item.size(); ++i) {
        if (check_value(item[i], field, at + "[" + std::to_string(i) + "]", out)) return true;
      }
    } else if (check_value(item, field, at, out)) {
      return true;
    }
  }
  return false;
}

bool check_value(const json& value, const FieldDescriptor* field, const std::string& path, Finding& out) {
  auto bad = [&](const std::string& expected) {
    out = {"bad_field", path, "expected " + expected + ", found " + kind_of(value) + " " + value.dump()};
    return true;
  };
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return check_object(value, field->message_type(), path, out);
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64: {
      long double lo = 0, hi = 0;
      int_range(field->cpp_type(), lo, hi);
      const std::string expected =
          "an integer in " + std::to_string(static_cast<long long>(lo)) + " .. " +
          (field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64 ? std::string("18446744073709551615")
                                                                : std::to_string(static_cast<long long>(hi)));
      long double number = 0;
      if (value.is_number_integer() && !value.is_number_unsigned()) {
        number = static_cast<long double>(value.get<int64_t>());
      } else if (value.is_number_unsigned()) {
        number = static_cast<long double>(value.get<uint64_t>());
      } else if (value.is_number_float()) {
        number = value.get<double>();
        if (std::floor(number) != number) return bad(expected);
      } else if (value.is_string()) {
        const std::string& s = value.get_ref<const std::string&>();
        size_t used = 0;
        try {
          number = std::stold(s, &used);
        } catch (...) {
          return bad(expected);
        }
        if (used != s.size() || std::floor(number) != number) return bad(expected);
      } else {
        return bad(expected);
      }
      if (number < lo || number > hi) return bad(expected);
      return false;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      if (value.is_number()) return false;
      if (value.is_string()) {
        const std::string& s = value.get_ref<const std::string&>();
        if (s == "NaN" || s == "Infinity" || s == "-Infinity") return false;
        try {
          size_t used = 0;
          std::stod(s, &used);
          if (used == s.size()) return false;
        } catch (...) {
        }
      }
      return bad("a number");
    case FieldDescriptor::CPPTYPE_BOOL:
      return value.is_boolean() ? false : bad("true or false");
    case FieldDescriptor::CPPTYPE_ENUM:
      return value.is_string() || value.is_number_integer() ? false : bad("an enum name or number");
    case FieldDescriptor::CPPTYPE_STRING:
      return value.is_string() ? false : bad("a string");
  }
  return false;
}

// Rejects fields that binary parsing kept as unknown: an unknown number, or a known number sent with the
// wrong wire type (protobuf cannot tell the two apart, so both are named here).
void check_no_unknown_fields(const Message& message, const std::string& path) {
  const Reflection* reflection = message.GetReflection();
  const auto& unknown = reflection->GetUnknownFields(message);
  if (!unknown.empty()) {
    const int number = unknown.field(0).number();
    const FieldDescriptor* known = message.GetDescriptor()->FindFieldByNumber(number);
    if (known != nullptr) {
      const std::string at = path.empty() ? known->name() : path + "." + known->name();
      throw ApiError(400, "bad_field",
                     "field " + at + " (number " + std::to_string(number) + ") has the wrong wire type", at);
    }
    const std::string at = (path.empty() ? "" : path + ".") + "#" + std::to_string(number);
    throw ApiError(
        400, "unknown_field",
        "unknown field number " + std::to_string(number) + " in " + message.GetDescriptor()->name(), at);
  }
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const std::string at = path.empty() ? field->name() : path + "." + field->name();
    if (field->is_repeated()) {
      const int n = reflection->FieldSize(message, field);
      for (int i = 0; i < n; ++i) {
        check_no_unknown_fields(reflection->GetRepeatedMessage(message, field, i),
                                at + "[" + std::to_string(i) + "]");
      }
    } else {
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
    check_no_unknown_fields(out, "");
    return;
  }
  // Fast path: protobuf's own parser; the diagnosis below runs only on failure.
  if (trim(body).empty()) return;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(body.data(), body.size()), &out, options);
  if (status.ok()) return;
  out.Clear();
  json document;
  try {
    document = json::parse(body.begin(), body.end());
  } catch (const json::parse_error& e) {
    throw ApiError(400, "bad_json", "the body is not valid JSON: " + std::string(e.what()));
  }
  Finding finding;
  if (check_object(document, out.GetDescriptor(), "", finding)) {
    throw ApiError(400, finding.code, finding.message, finding.field);
  }
  throw ApiError(
      400, "bad_json",
      "the body is not a valid " + out.GetDescriptor()->name() + ": " + std::string(status.message()));
}

std::string encode_message(const Message& message, WireFormat format) {
  // Deterministic serialization sorts map entries by key, so equal messages give equal bytes (protobuf's
  // maps iterate in a per-instance hash order otherwise). JSON is printed from those bytes.
  std::string binary;
  {
    google::protobuf::io::StringOutputStream stream(&binary);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  if (format == WireFormat::kProtobuf) return binary;
  static auto* const resolver = google::protobuf::util::NewTypeResolverForDescriptorPool(
      kTypeUrlPrefix, google::protobuf::DescriptorPool::generated_pool());
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  const auto status = google::protobuf::util::BinaryToJsonString(
      resolver, std::string(kTypeUrlPrefix) + "/" + message.GetDescriptor()->full_name(), binary, &out,
      options);
  if (!status.ok())
    throw ApiError(500, "internal", "could not encode the answer: " + std::string(status.message()));
  return out;
}

}  // namespace crl::server
