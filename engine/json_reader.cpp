#include "engine/json_reader.h"

#include <vector>

namespace crl {

namespace {

using nlohmann::json;

// Builds the DOM from nlohmann's SAX events (as its own json_sax_dom_parser does), counting the depth and
// checking each key against the object being built. nlohmann's SAX parser is iterative, so nothing here
// recurses; a limit breach throws at once, before the rest of the text is read.
class DomBuilder {
 public:
  DomBuilder(const std::string& where, int max_depth) : where_(where), max_depth_(max_depth) {}

  json take() { return std::move(root_); }

  bool null() { return put(json(nullptr)); }
  bool boolean(bool value) { return put(json(value)); }
  bool number_integer(json::number_integer_t value) { return put(json(value)); }
  bool number_unsigned(json::number_unsigned_t value) { return put(json(value)); }
  bool number_float(json::number_float_t value, const json::string_t&) { return put(json(value)); }
  bool string(json::string_t& value) { return put(json(std::move(value))); }
  bool binary(json::binary_t& value) { return put(json(std::move(value))); }

  bool start_object(std::size_t) { return open(json::value_t::object); }
  bool start_array(std::size_t) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& key) {
    Level& level = stack_.back();
    auto& object = level.node->get_ref<json::object_t&>();
    // One lookup: try_emplace leaves `key` untouched when it is already there.
    const auto [it, inserted] = object.try_emplace(std::move(key), nullptr);
    if (!inserted) {
      const std::string at = path(stack_.size(), &it->first);
      const std::string shown = text_prefix(it->first);
      throw JsonError(JsonErrorKind::kDuplicateKey, where_, at,
                      "duplicate key \"" + shown + "\"" + (at == shown ? "" : " at " + at) +
                          " (each key may appear once in an object)");
    }
    level.key = &it->first;
    element_ = &it->second;
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const json::exception& e) {
    // nlohmann's message holds the token read last, which may be a whole (long) string: keep its start.
    std::string what = e.what();
    if (const size_t bracket = what.find("] ");
        what.starts_with("[json.exception.") && bracket != what.npos) {
      what = what.substr(bracket + 2);
    }
    throw JsonError(JsonErrorKind::kSyntax, where_, "",
                    "not valid JSON (byte " + std::to_string(position) + "): " + text_prefix(what, 200));
  }

 private:
  struct Level {
    json* node;
    const std::string* key = nullptr;  // objects: the key being read (for error paths)
  };

  // Stores a value where the parser is: the root, the next array element, or the object's current key.
  json* place(json&& value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *stack_.back().node;
    if (parent.is_array()) {
      auto& array = parent.get_ref<json::array_t&>();
      array.push_back(std::move(value));
      return &array.back();
    }
    *element_ = std::move(value);
    return element_;
  }
  bool put(json&& value) {
    place(std::move(value));
    return true;
  }
  bool open(json::value_t type) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      const std::string at = path(stack_.size(), nullptr);
      throw JsonError(JsonErrorKind::kTooDeep, where_, at,
                      "JSON nested deeper than " + std::to_string(max_depth_) +
                          " levels of arrays and objects (" + std::to_string(max_depth_) + " is the limit)");
    }
    stack_.push_back(Level{place(json(type))});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  // The path of the value being read at `depth` levels ("a.b[3]"), plus `last` when given. Short: the
  // levels are at most max_depth, and each key is cut to a prefix.
  std::string path(size_t depth, const std::string* last) const {
    std::string out;
    for (size_t i = 0; i < depth; ++i) {
      const Level& level = stack_[i];
      const bool innermost = i + 1 == depth;  // its child is not stored yet (or is the duplicate `last`)
      if (level.node->is_array()) {
        const size_t size = level.node->size();
        out += "[" + std::to_string(innermost ? size : size - 1) + "]";
      } else if (const std::string* key = innermost && last != nullptr ? last : level.key) {
        if (!out.empty()) out += '.';
        out += text_prefix(*key, 40);
      }
    }
    return out;
  }

  const std::string& where_;
  const int max_depth_;
  json root_;
  std::vector<Level> stack_;
  json* element_ = nullptr;  // the value slot of the object key read last
};

void append_preview(const json& value, std::string& out, size_t limit) {
  if (out.size() >= limit) return void(out += "...");
  switch (value.type()) {
    case json::value_t::object:
    case json::value_t::array: {
      const bool object = value.is_object();
      out += object ? '{' : '[';
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!first) out += ',';
        first = false;
        if (out.size() >= limit) return void(out += "...");
        if (object) {
          out += json(text_prefix(it.key(), limit - out.size()))
                     .dump(-1, ' ', false, json::error_handler_t::replace);
          out += ':';
        }
        append_preview(*it, out, limit);
        if (out.size() >= limit) return;
      }
      out += object ? '}' : ']';
      return;
    }
    case json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      const size_t room = limit > out.size() + 2 ? limit - out.size() - 2 : 0;
      out += json(text_prefix(s, room)).dump(-1, ' ', false, json::error_handler_t::replace);
      return;
    }
    case json::value_t::binary:
      out += "<binary>";
      return;
    default:  // null, booleans and numbers print in a few bytes
      out += value.dump();
  }
}

}  // namespace

std::string_view JsonError::code() const {
  switch (kind_) {
    case JsonErrorKind::kTooDeep:
      return "json_too_deep";
    case JsonErrorKind::kDuplicateKey:
      return "duplicate_key";
    case JsonErrorKind::kSyntax:
      break;
  }
  return "bad_json";
}

json read_json(std::string_view text, const std::string& where, int max_depth) {
  DomBuilder builder(where, max_depth);
  try {
    json::sax_parse(text.begin(), text.end(), &builder, json::input_format_t::json, /*strict=*/true);
  } catch (const json::exception& e) {
    // The parser throws a few errors itself instead of reporting them (e.g. a number out of range in some
    // versions): they are syntax errors all the same.
    throw JsonError(JsonErrorKind::kSyntax, where, "", "not valid JSON: " + text_prefix(e.what(), 200));
  }
  return builder.take();
}

std::string json_preview(const json& value, size_t limit) {
  std::string out;
  append_preview(value, out, limit);
  return out;
}

std::string text_prefix(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(text.substr(0, cut)) + "...";
}

}  // namespace crl
