// JsonView's out-of-line accessors over a parsed document's nodes (engine/json_view.h); the reader that makes
// the nodes is engine/json_parser.cpp.
#include "engine/json_view.h"

#include <stdexcept>
#include <string>

#include "engine/error.h"

namespace crl {

JsonNumber JsonView::number_value() const {
  JsonNumber out;
  out.kind = number_kind();
  out.value = doc_->nodes()[index_].number;
  return out;
}

void JsonView::wrong_type(const char* wanted) {
  throw Error("JsonView", "", std::string("the value is not ") + wanted);
}

void JsonView::unread_value() {
  throw std::logic_error(
      "JsonView: a value stored unread (a JsonKnownMember, JsonNumberRows or unread array) is read by its "
      "text alone");
}

bool JsonView::boolean() const {
  if (!is_bool()) wrong_type("a boolean");
  return doc_->nodes()[index_].flag;
}

JsonNumberKind JsonView::number_kind() const {
  if (!is_number()) wrong_type("a number");
  return doc_->nodes()[index_].kind;
}

double JsonView::number() const {
  return number_value().as_double();
}

int64_t JsonView::integer() const {
  if (!is_integer()) wrong_type("an integer");
  return number_value().as_integer();
}

JsonView JsonView::find(std::string_view key) const {
  if (!is_object()) return {};
  for (JsonView member : *this) {
    if (member.key() == key) return member;
  }
  return {};
}

template <typename Json>
Json JsonView::as() const {
  using json = Json;
  if (!exists()) return json();
  const auto& node = doc_->nodes()[index_];
  switch (node.type) {
    case JsonType::kNull:
      return json(nullptr);
    case JsonType::kBool:
      return json(node.flag);
    case JsonType::kNumber:
      if (node.kind == JsonNumberKind::kUnsigned) return json(node.number.u);
      if (node.kind == JsonNumberKind::kSigned) return json(node.number.i);
      return json(node.number.d);
    case JsonType::kString:
      return json(std::string(node.text_view()));
    case JsonType::kArray: {
      json out = json::array();
      for (const JsonView element : *this) out.push_back(element.as<Json>());
      return out;
    }
    case JsonType::kObject: {
      json out = json::object();
      for (const JsonView member : *this) out[std::string(member.key())] = member.as<Json>();
      return out;
    }
  }
  return json();
}

nlohmann::json JsonView::to_json() const {
  return as<nlohmann::json>();
}
nlohmann::ordered_json JsonView::to_ordered_json() const {
  return as<nlohmann::ordered_json>();
}

}  // namespace crl
