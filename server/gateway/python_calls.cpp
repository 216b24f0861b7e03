#include "server/gateway/python_calls.h"

#include <charconv>
#include <cmath>

#include "engine/python_escape.h"
#include "wire/utf8.h"

namespace crl::server::gateway {

namespace {

using nlohmann::ordered_json;

constexpr int kMaxDepth = 64;

// A recursive-descent reader over the text; every method returns false on anything it does not accept.
class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  bool calls(std::vector<PythonCall>& out) {
    blanks();
    if (!eat('[')) return false;
    blanks();
    while (!at(']')) {
      PythonCall call;
      if (!name(call.name)) return false;
      blanks();
      if (!eat('(')) return false;
      call.arguments = ordered_json::object();
      blanks();
      while (!at(')')) {
        std::string key;
        if (!name(key) || call.arguments.contains(key)) return false;
        blanks();
        if (!eat('=')) return false;
        blanks();
        ordered_json value;
        if (!literal(value, 0)) return false;
        call.arguments[key] = std::move(value);
        blanks();
        if (!eat(',')) break;
        blanks();
      }
      if (!eat(')')) return false;
      out.push_back(std::move(call));
      blanks();
      if (!eat(',')) break;
      blanks();
    }
    if (!eat(']')) return false;
    blanks();
    return pos_ == text_.size() && !out.empty();
  }

 private:
  bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  bool eat(char c) {
    if (!at(c)) return false;
    ++pos_;
    return true;
  }
  void blanks() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' || text_[pos_] == '\r'))
      ++pos_;
  }
  static bool word_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool word_char(char c) { return word_start(c) || (c >= '0' && c <= '9'); }
  bool name(std::string& out) {
    if (pos_ >= text_.size() || !word_start(text_[pos_])) return false;
    const size_t start = pos_;
    while (pos_ < text_.size() && word_char(text_[pos_])) ++pos_;
    out.assign(text_.substr(start, pos_ - start));
    return true;
  }

  bool literal(ordered_json& out, int depth) {
    if (depth > kMaxDepth || pos_ >= text_.size()) return false;
    const char c = text_[pos_];
    if (c == '\'' || c == '"') {
      std::string s;
      if (!string(s)) return false;
      out = std::move(s);
      return true;
    }
    if (c == '[' || c == '(') return sequence(out, c == '[' ? ']' : ')', depth);
    if (c == '{') return dict(out, depth);
    if (c == '-' || c == '+' || (c >= '0' && c <= '9') || c == '.') return number(out);
    std::string word;
    if (!name(word)) return false;
    if (word == "True")
      out = true;
    else if (word == "False")
      out = false;
    else if (word == "None")
      out = nullptr;
    else
      return false;
    return true;
  }

  bool sequence(ordered_json& out, char close, int depth) {
    ++pos_;
    out = ordered_json::array();
    blanks();
    while (!at(close)) {
      ordered_json item;
      if (!literal(item, depth + 1)) return false;
      out.push_back(std::move(item));
      blanks();
      if (!eat(',')) break;
      blanks();
    }
    return eat(close);
  }

  bool dict(ordered_json& out, int depth) {
    ++pos_;
    out = ordered_json::object();
    blanks();
    while (!at('}')) {
      std::string key;
      if (!at('\'') && !at('"')) return false;  // string keys only: JSON objects have no others
      if (!string(key)) return false;
      blanks();
      if (!eat(':')) return false;
      blanks();
      ordered_json value;
      if (!literal(value, depth + 1)) return false;
      out[key] = std::move(value);  // (a repeated key keeps the last value, as Python's dict does)
      blanks();
      if (!eat(',')) break;
      blanks();
    }
    return eat('}');
  }

  bool number(ordered_json& out) {
    const size_t start = pos_;
    if (at('-') || at('+')) ++pos_;
    bool is_float = false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
        ++pos_;
        if ((c == 'e' || c == 'E') && (at('-') || at('+'))) ++pos_;
      } else {
        break;
      }
    }
    std::string_view digits = text_.substr(start, pos_ - start);
    if (!digits.empty() && digits[0] == '+') digits.remove_prefix(1);
    if (digits.empty()) return false;
    if (!is_float) {
      int64_t value = 0;
      const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
      if (error != std::errc() || end != digits.data() + digits.size()) return false;
      out = value;
      return true;
    }
    double value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error != std::errc() || end != digits.data() + digits.size() || !std::isfinite(value)) return false;
    out = value;
    return true;
  }

  // A quoted string with Python's escapes (engine/python_escape.h); the result must be valid UTF-8 (JSON
  // text: a lone surrogate escape is refused here).
  bool string(std::string& out) {
    const char quote = text_[pos_++];
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == quote) return wire::is_valid_utf8(out);
      if (c == '\n') return false;  // a plain string literal ends on its line
      if (c != '\\') {
        out += c;
        continue;
      }
      if (!append_python_escape(text_, pos_, out)) return false;
    }
    return false;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

std::optional<std::vector<PythonCall>> read_python_calls(std::string_view text) {
  std::vector<PythonCall> calls;
  if (!Reader(text).calls(calls)) return std::nullopt;
  return calls;
}

}  // namespace crl::server::gateway
