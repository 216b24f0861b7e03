#pragma once
// A fast, strict JSON reader for the hot paths (the gateway's request bodies, the LLM server's answers):
// one pass over the text into a flat array of nodes, strings as views into the text (unescaped into the
// document's own buffer only when they hold an escape), no DOM of heap objects. Same acceptance and limits
// as read_json (json_reader.h), checked by a differential test against it:
//  * RFC 8259 grammar, nothing but whitespace after the value (a UTF-8 byte order mark before it is skipped,
//    as nlohmann does); NUL and other control bytes only as escapes inside strings.
//  * strings: well-formed UTF-8 only (no overlong forms, no encoded surrogates, nothing above U+10FFFF);
//    \u escapes must pair a high surrogate with a low one.
//  * numbers: the grammar's exact form; integers are kept exactly (unsigned when >= 0, signed when < 0, as
//    nlohmann types them), an integer beyond 64 bits becomes a double, a double that overflows is an error
//    (nlohmann's "number overflow"), doubles are correctly rounded (decimal_to_double from the digits read
//    while scanning, engine/decimal_double.h; std::from_chars / strtod where it declines).
//  * nesting deeper than max_depth levels of arrays and objects: JsonErrorKind::kTooDeep, the path named.
//  * a key repeated in one object: JsonErrorKind::kDuplicateKey, the path named.
//  * syntax errors name the byte offset and what was expected there ("not valid JSON (byte 17): expected
//    ',' or '}' after an object member, found 'x'").
// A JsonView is valid while its JsonDocument and the parsed text live (views point into both).
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_reader.h"

namespace crl {

enum class JsonType : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
// How a number was written: a non-negative integer, a negative integer (both within 64 bits) or anything
// else (a fraction, an exponent or an integer beyond 64 bits), as nlohmann's number_unsigned /
// number_integer / number_float.
enum class JsonNumberKind : uint8_t { kUnsigned, kSigned, kFloat };

class JsonDocument;

// A number's value, as its JsonNumberKind says.
union JsonNumberValue {
  uint64_t u;
  int64_t i;
  double d;
};

// A number as the parser read it (a node's value, or a cell of JsonNumberRows).
struct JsonNumber {
  JsonNumberKind kind = JsonNumberKind::kUnsigned;
  JsonNumberValue value{0};
  // Written as an integer that fits 64 bits (nlohmann's is_number_integer).
  bool is_integer() const { return kind != JsonNumberKind::kFloat; }
  double as_double() const {
    return kind == JsonNumberKind::kUnsigned ? static_cast<double>(value.u)
           : kind == JsonNumberKind::kSigned ? static_cast<double>(value.i)
                                             : value.d;
  }
  // is_integer(): the value (an unsigned one above INT64_MAX wraps, as nlohmann).
  int64_t as_integer() const {
    return kind == JsonNumberKind::kSigned ? value.i : static_cast<int64_t>(value.u);
  }
};

class JsonView {
 public:
  JsonView() = default;  // absent (a member that is not there)

  bool exists() const { return doc_ != nullptr; }
  JsonType type() const;
  bool is_null() const { return exists() && type() == JsonType::kNull; }
  bool is_bool() const { return exists() && type() == JsonType::kBool; }
  bool is_number() const { return exists() && type() == JsonType::kNumber; }
  // A number written as an integer that fits 64 bits (nlohmann's is_number_integer).
  bool is_integer() const;
  bool is_string() const { return exists() && type() == JsonType::kString; }
  bool is_array() const { return exists() && type() == JsonType::kArray; }
  bool is_object() const { return exists() && type() == JsonType::kObject; }
  // Absent or null.
  bool is_none() const { return !exists() || type() == JsonType::kNull; }

  // Typed reads; each requires the matching type (checked: crl::Error otherwise).
  bool boolean() const;
  std::string_view string() const;
  double number() const;    // any number, as a double
  int64_t integer() const;  // is_integer(): the value (an unsigned one above INT64_MAX wraps, as nlohmann)
  JsonNumberKind number_kind() const;
  JsonNumber number_value() const;  // requires a number

  // Arrays: elements; objects: members. 0 for anything else.
  size_t size() const;
  // An object's member (absent when this is not an object or has no such key).
  JsonView find(std::string_view key) const;
  // The key of this value when it is an object member ("" otherwise).
  std::string_view key() const;
  // The bytes of the text this value was read from, for anything but a string (a string: its value).
  std::string_view raw() const;

  // Iteration over an array's elements or an object's member values (key() names each).
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = JsonView;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = JsonView;
    Iterator() = default;
    JsonView operator*() const { return JsonView(doc_, index_); }
    Iterator& operator++();
    Iterator operator++(int) {
      Iterator before = *this;
      ++*this;
      return before;
    }
    bool operator==(const Iterator& other) const { return index_ == other.index_; }
    bool operator!=(const Iterator& other) const { return index_ != other.index_; }

   private:
    friend class JsonView;
    Iterator(const JsonDocument* doc, uint32_t index) : doc_(doc), index_(index) {}
    const JsonDocument* doc_ = nullptr;
    uint32_t index_ = 0;
  };
  Iterator begin() const;
  Iterator end() const;

  // The value as nlohmann's DOM (same types and values as read_json gives), for the rare values passed on
  // whole (tool definitions, tool-call arguments written as objects).
  nlohmann::json to_json() const;
  // The same with the object keys in the order of the text (what a chat template must see: tools).
  nlohmann::ordered_json to_ordered_json() const;

 private:
  template <typename Json>
  Json as() const;
  [[noreturn]] static void wrong_type(const char* wanted);
  [[noreturn]] static void unread_value();
  const auto& node() const;
  friend class JsonDocument;
  JsonView(const JsonDocument* doc, uint32_t index) : doc_(doc), index_(index) {}
  const JsonDocument* doc_ = nullptr;
  uint32_t index_ = 0;
};

// A member of the root object whose value a parse may store unread when its text is, byte for byte, `text`:
// an array or object read before at the same place (a root object's member), whose validity depends only on
// its own bytes and its depth, so the document is accepted or refused, with the same error, either way. Its
// node keeps the text (raw()) but not its elements: size(), find(), iteration and to_json() on it throw
// std::logic_error, so a reader compares raw() with what it read before. (Why: an agent harness sends the
// same tools, KBs of JSON schemas, with every call; server/gateway/kept_request.h.)
struct JsonKnownMember {
  std::string_view key;
  std::string_view text;  // starts with '[' or '{' (anything else is read as usual)
};

// An array of rows of numbers that a parse reads into a flat list of numbers instead of a node per value:
// an LLM answer's per-token lists (SGLang's output_ids [id, ...] and output_token_logprobs [[logprob, id,
// null], ...], vLLM's token_ids and token_logprobs), otherwise two to five nodes of 48 bytes and a pass of
// the parser's loop per token, the larger part of reading an answer. The parse takes the first array, in
// document order, that is the value of a member named `key` (at any depth) and has the shape asked, its
// elements each a number (`bracketed` false) or an array of `numbers` numbers followed by `nulls` nulls
// (whitespace allowed anywhere JSON allows it). Its node is stored unread (raw() is its text; size(),
// iteration, find() throw std::logic_error, as for a JsonKnownMember). An array of any other shape (a
// string where a number was asked, a fourth field, a number the parser refuses) is read as usual, so a
// document is accepted or refused, with the same error, and its numbers have the same values, with rows
// asked or without. A reader checks that the array it found is the one taken (`taken(view)`), and reads it
// from the DOM otherwise.
//
// `expected` (bare numbers only): the JSON text of an array of integers that the caller wrote itself (the
// prompt's id list it sent, which vLLM answers back). An array at the key whose text starts with exactly
// these bytes is taken as it is, its numbers not scanned (`matched`, `cells` empty): the same bytes are the
// same valid JSON at the same depth, and the caller knows their values.
struct JsonNumberRows {
  std::string_view key;
  bool bracketed = false;
  int numbers = 1;  // bracketed: the numbers of each row (>= 1)
  int nulls = 0;    // bracketed: the nulls after them
  std::string_view expected;

  // Set by the parse.
  std::string_view text;          // the array taken (empty: none)
  bool matched = false;           // its text is `expected`
  std::vector<JsonNumber> cells;  // the numbers of its rows, row after row (none when matched)
  size_t rows() const { return cells.size() / static_cast<size_t>(bracketed ? numbers : 1); }
  bool taken(JsonView array) const { return !text.empty() && array.raw().data() == text.data(); }
};

class JsonDocument {
 public:
  // Parses `text` (which must outlive the document). `where` names the source in errors. Throws JsonError.
  // `rows`: arrays of numbers to read as JsonNumberRows (cleared first).
  // `unread_arrays`: keys whose array values the caller reads nothing of (an LLM answer's per-token texts):
  // each such array (the value of a member with one of these keys, at any depth) that engine/json_skim.h's
  // quick check finds valid is stored as one unread node (raw() is its text; size(), iteration, find()
  // throw std::logic_error, as for a JsonKnownMember), its values neither read nor stored. Any other array
  // there is read as usual: a document is accepted or refused, with the same error, as without the keys.
  static JsonDocument parse(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth,
                            const JsonKnownMember* known = nullptr, std::span<JsonNumberRows> rows = {},
                            std::span<const std::string_view> unread_arrays = {});

  // The same for a large text read once (a model's tokenizer.json: tens of MB, millions of values), with the
  // default depth limit: its values are counted first, so their nodes are allocated once, on huge pages
  // (Gemma 3's 33 MB file: 1.8 million nodes, read in 88-95 against 513-564 ms, bench/RESULTS.md).
  static JsonDocument parse_large(std::string_view text, const std::string& where);

  JsonDocument() = default;
  JsonDocument(JsonDocument&&) noexcept = default;
  JsonDocument& operator=(JsonDocument&&) noexcept = default;
  // Gives the node array's storage to the next parse on this thread (a small document, an LLM's answer, paid
  // more for that allocation and the heap's consolidation it triggered than for its bytes). A thread keeps at
  // most one array of at most 4096 nodes (192 KiB) so.
  ~JsonDocument();

  JsonView root() const { return JsonView(this, 0); }

  // 48 bytes per value (plus the node array's growth slack): at most 24 times the text before the slack (a
  // value takes two bytes of text at least, "0,"), the order of nlohmann's DOM of it (16 bytes per value plus
  // a heap block per string and its vectors' slack).
  struct Node {
    const char* text = nullptr;  // strings: the (unescaped) value; anything else: its source bytes
    const char* key = nullptr;   // object members: the (unescaped) key
    uint32_t text_size = 0, key_size = 0;
    JsonNumberValue number{0};
    uint32_t count = 0;  // arrays and objects: elements or members
    uint32_t end = 0;    // the index one past this value's last descendant (the next sibling's index)
    JsonType type = JsonType::kNull;
    JsonNumberKind kind = JsonNumberKind::kUnsigned;
    bool flag = false;  // booleans: the value
    // A JsonKnownMember's value, JsonNumberRows' array or an unread array: its text only.
    bool unread = false;
    std::string_view text_view() const { return {text, text_size}; }
    std::string_view key_view() const { return {key, key_size}; }
  };
  const std::vector<Node>& nodes() const { return nodes_; }

 private:
  friend class JsonParser;
  std::vector<Node> nodes_;
  std::unique_ptr<std::string>
      unescaped_;  // strings with escapes, decoded (capacity fixed: views stay valid)
};

// The accessors the hot paths call per value (an LLM answer's ids and log-probs, a request's messages),
// inline: out of line, their calls were a fifth of reading an answer.
inline const auto& JsonView::node() const {
  return doc_->nodes()[index_];
}
inline JsonType JsonView::type() const {
  return node().type;
}
inline bool JsonView::is_integer() const {
  return is_number() && node().kind != JsonNumberKind::kFloat;
}
inline std::string_view JsonView::string() const {
  if (!is_string()) wrong_type("a string");
  return node().text_view();
}
inline size_t JsonView::size() const {
  if (!is_array() && !is_object()) return 0;
  if (node().unread) unread_value();
  return node().count;
}
inline std::string_view JsonView::key() const {
  return exists() ? node().key_view() : std::string_view();
}
inline std::string_view JsonView::raw() const {
  return exists() ? node().text_view() : std::string_view();
}
inline JsonView::Iterator& JsonView::Iterator::operator++() {
  index_ = doc_->nodes()[index_].end;
  return *this;
}
inline JsonView::Iterator JsonView::begin() const {
  return size() == 0 ? end() : Iterator(doc_, index_ + 1);
}
inline JsonView::Iterator JsonView::end() const {
  return Iterator(doc_, exists() ? node().end : 0);
}

}  // namespace crl
