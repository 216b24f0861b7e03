// The JSON reader (engine/json_view.h): text into a document's nodes, and JsonDocument's parse. The view
// over those nodes is engine/json_view.cpp; the duplicate-key check's keys engine/json_object_keys.h; arrays
// read as rows of numbers engine/json_number_rows.cpp; unread arrays checked by engine/json_skim.h.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "engine/heap.h"
#include "engine/json_number_rows.h"
#include "engine/json_number_scan.h"
#include "engine/json_object_keys.h"
#include "engine/json_skim.h"
#include "engine/json_view.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace crl {

// The parser: an explicit stack of open arrays and objects (never recursion, so the depth limit is the only
// bound on nesting), one node per value appended in document order, so a value's descendants are the nodes
// between it and its `end`.
class JsonParser {
 public:
  JsonParser(std::string_view text, const std::string& where, int max_depth, JsonDocument& doc,
             const JsonKnownMember* known = nullptr, std::span<JsonNumberRows> rows = {},
             std::span<const std::string_view> unread_arrays = {})
      : text_(text),
        where_(where),
        max_depth_(max_depth),
        known_(known),
        rows_(rows),
        unread_arrays_(unread_arrays),
        doc_(doc),
        stack_(scratch().stack),
        keys_(scratch().keys) {
    stack_.clear();  // (a parse that threw left its levels)
  }

  void run() {
    if (text_.size() >= UINT32_MAX) fail_at(0, "a text shorter than 4 GiB");
    // A UTF-8 byte order mark is skipped (nlohmann does; RFC 8259 allows a reader to ignore it).
    if (text_.size() >= 3 && text_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;
    doc_.nodes_.reserve(16 + std::min<size_t>(text_.size() / 16, 4096));  // a value per ~16 bytes: answers
    bool after_value = false;  // false: a value is expected next; true: one was just read
    while (true) {
      skip_space();
      if (!after_value) {
        if (pos_ >= text_.size()) fail("expected a value");
        const char c = text_[pos_];
        if (known_ && stack_.size() == 1 && (c == '{' || c == '[') && known_here()) {
          skip_known(c == '{' ? JsonType::kObject : JsonType::kArray);
          after_value = true;
          continue;
        }
        if (c == '[' && (!rows_.empty() || !unread_arrays_.empty()) && (take_rows() || take_unread())) {
          after_value = true;
          continue;
        }
        if (c == '{' || c == '[') {
          open(c == '{' ? JsonType::kObject : JsonType::kArray);
          skip_space();
          const char close_char = c == '{' ? '}' : ']';
          if (pos_ < text_.size() && text_[pos_] == close_char) {
            close();
            after_value = true;
          } else if (c == '{') {
            read_key();
          }
          continue;
        }
        scalar();
        // Arrays of numbers (an LLM answer's ids, its log-probs): "1,2,3" read here, without a round
        // through this loop per element. Only a comma followed at once by a number's first byte is taken;
        // anything else (spaces, other values, the end, errors) goes the general way.
        if (!stack_.empty() && doc_.nodes_[stack_.back().node].type == JsonType::kArray) {
          while (pos_ + 1 < text_.size() && text_[pos_] == ',' &&
                 (text_[pos_ + 1] == '-' || static_cast<unsigned char>(text_[pos_ + 1] - '0') < 10)) {
            ++pos_;
            number();
          }
        }
        after_value = true;
        continue;
      }
      if (stack_.empty()) {
        if (pos_ < text_.size()) fail("expected the end of the text after the value");
        return;
      }
      Level& level = stack_.back();
      const bool object = doc_.nodes_[level.node].type == JsonType::kObject;
      const char c = pos_ < text_.size() ? text_[pos_] : '\0';
      if (pos_ < text_.size() && c == ',') {
        ++pos_;
        if (object) {
          skip_space();
          read_key();
        }
        after_value = false;
      } else if (pos_ < text_.size() && c == (object ? '}' : ']')) {
        close();
      } else {
        fail(object ? "expected ',' or '}' after an object member"
                    : "expected ',' or ']' after an array element");
      }
    }
  }

 private:
  struct Level {
    uint32_t node;
    size_t start;          // the offset of its opening bracket
    std::string_view key;  // objects: the key of the member being read
  };

  // Whether the value at pos_ is the known member's: a member of the root object with its key, whose text
  // starts with the known text (an array or object: it ends where that text ends).
  bool known_here() const {
    const Level& level = stack_.back();
    return doc_.nodes_[level.node].type == JsonType::kObject && level.key == known_->key &&
           text_.compare(pos_, known_->text.size(), known_->text) == 0;
  }
  void skip_known(JsonType type) {
    JsonDocument::Node& node = add(type);
    set_text(node, text_.substr(pos_, known_->text.size()));
    node.end = static_cast<uint32_t>(doc_.nodes_.size());
    node.unread = true;
    pos_ += known_->text.size();
  }

  // Whether the array at pos_ is the value of a member that rows_ asks for, in its shape: then it is read
  // into that JsonNumberRows and stored as one unread node (JsonNumberRows in json_view.h).
  bool take_rows() {
    if (stack_.empty()) return false;
    const Level& level = stack_.back();
    if (doc_.nodes_[level.node].type != JsonType::kObject) return false;
    for (JsonNumberRows& rows : rows_) {
      if (!rows.text.empty() || rows.key != level.key) continue;
      size_t end = 0;
      if (!rows.expected.empty() && within_depth(rows) &&
          text_.compare(pos_, rows.expected.size(), rows.expected) == 0) {
        rows.matched = true;
        end = pos_ + rows.expected.size();
      } else {
        end = read_rows(rows);
      }
      if (end == 0) {
        rows.cells.clear();
        continue;
      }
      JsonDocument::Node& node = add(JsonType::kArray);
      set_text(node, text_.substr(pos_, end - pos_));
      node.end = static_cast<uint32_t>(doc_.nodes_.size());
      node.unread = true;
      rows.text = node.text_view();
      pos_ = end;
      return true;
    }
    return false;
  }

  // Whether the array at pos_ is the value of a member named in unread_arrays_ that json_skim finds to be
  // one the general reading accepts: then it is stored as one unread node, its values not read.
  bool take_unread() {
    if (unread_arrays_.empty() || stack_.empty()) return false;
    const Level& level = stack_.back();
    if (doc_.nodes_[level.node].type != JsonType::kObject ||
        std::find(unread_arrays_.begin(), unread_arrays_.end(), level.key) == unread_arrays_.end())
      return false;
    const char* const start = text_.data() + pos_;
    const char* const end = json_skim::Skimmer(text_, max_depth_).value(start, stack_.size() + 1);
    if (end == nullptr) return false;
    JsonDocument::Node& node = add(JsonType::kArray);
    set_text(node, std::string_view(start, static_cast<size_t>(end - start)));
    node.end = static_cast<uint32_t>(doc_.nodes_.size());
    node.unread = true;
    pos_ = static_cast<size_t>(end - text_.data());
    return true;
  }

  // The array's level and, bracketed, its rows' must be within the depth the general reading allows.
  bool within_depth(const JsonNumberRows& rows) const {
    return stack_.size() + (rows.bracketed ? 2u : 1u) <= static_cast<size_t>(std::max(max_depth_, 0));
  }

  // The array at pos_ read as `rows` asks (engine/json_number_rows.h), within the depth allowed.
  size_t read_rows(JsonNumberRows& rows) const {
    return within_depth(rows) ? read_number_rows(text_, pos_, rows) : 0;
  }

  [[noreturn]] void fail(const std::string& expected) const { fail_at(pos_, expected); }
  [[noreturn]] void fail_at(size_t at, const std::string& expected) const {
    std::string found;
    if (at >= text_.size()) {
      found = "the end of the text";
    } else {
      const auto c = static_cast<unsigned char>(text_[at]);
      if (c >= 0x20 && c < 0x7F) {
        found = std::string("'") + static_cast<char>(c) + "'";
      } else {
        static constexpr char kHex[] = "0123456789ABCDEF";
        found = std::string("byte 0x") + kHex[c >> 4] + kHex[c & 15];
      }
    }
    throw JsonError(JsonErrorKind::kSyntax, where_, "",
                    "not valid JSON (byte " + std::to_string(at) + "): " + expected + ", found " + found);
  }

  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
      ++pos_;
    }
  }

  // The path of the value being read ("messages[3].content"), with `last` as the innermost key when given.
  std::string path(const std::string_view* last, bool opening) const {
    std::string out;
    for (size_t i = 0; i < stack_.size(); ++i) {
      const JsonDocument::Node& node = doc_.nodes_[stack_[i].node];
      const bool innermost = i + 1 == stack_.size();
      if (node.type == JsonType::kArray) {
        // The element being read is stored already, except the one being opened at the innermost level.
        const uint32_t index = innermost && opening ? node.count : node.count - 1;
        out += "[" + std::to_string(index) + "]";
      } else {
        const std::string_view key = innermost && last != nullptr ? *last : stack_[i].key;
        if (!out.empty()) out += '.';
        out += text_prefix(key, 40);
      }
    }
    return out;
  }

  static void set_text(JsonDocument::Node& node, std::string_view text) {
    node.text = text.data();
    node.text_size = static_cast<uint32_t>(text.size());
  }

  // A new node for the value starting at pos_, as the next child of the open container. (Built in place: a
  // node is 48 bytes, and an LLM's answer is mostly small numbers, one node each.)
  JsonDocument::Node& add(JsonType type) {
    if (doc_.nodes_.size() >= UINT32_MAX - 1) fail("a document of fewer than 2^32 values");
    JsonDocument::Node& node = doc_.nodes_.emplace_back();
    node.type = type;
    if (!stack_.empty()) {
      const Level& level = stack_.back();
      JsonDocument::Node& parent = doc_.nodes_[level.node];
      ++parent.count;
      if (parent.type == JsonType::kObject) {
        node.key = level.key.data();
        node.key_size = static_cast<uint32_t>(level.key.size());
      }
    }
    return node;
  }

  void open(JsonType type) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      const std::string at = path(nullptr, true);
      throw JsonError(JsonErrorKind::kTooDeep, where_, at,
                      "JSON nested deeper than " + std::to_string(max_depth_) +
                          " levels of arrays and objects (" + std::to_string(max_depth_) + " is the limit)");
    }
    add(type);
    stack_.push_back(Level{static_cast<uint32_t>(doc_.nodes_.size() - 1), pos_, {}});
    if (keys_.size() < stack_.size()) keys_.resize(stack_.size());
    keys_[stack_.size() - 1].clear();
    ++pos_;
  }

  void close() {
    const Level& level = stack_.back();
    JsonDocument::Node& node = doc_.nodes_[level.node];
    ++pos_;
    node.end = static_cast<uint32_t>(doc_.nodes_.size());
    set_text(node, text_.substr(level.start, pos_ - level.start));
    stack_.pop_back();
  }

  // A member's key and its ':'; a key already in the object is an error at once (as read_json: before the
  // rest of the text is read).
  void read_key() {
    if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected '\"' to start an object key");
    const std::string_view key = string();
    if (!keys_[stack_.size() - 1].add(key)) {
      const std::string at = path(&key, false);
      const std::string shown = text_prefix(key);
      throw JsonError(JsonErrorKind::kDuplicateKey, where_, at,
                      "duplicate key \"" + shown + "\"" + (at == shown ? "" : " at " + at) +
                          " (each key may appear once in an object)");
    }
    stack_.back().key = key;
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] != ':') fail("expected ':' after an object key");
    ++pos_;
  }

  void scalar() {
    const size_t start = pos_;
    const char c = text_[pos_];
    if (c == '"') {
      const std::string_view value = string();
      JsonDocument::Node& node = add(JsonType::kString);
      set_text(node, value);
      node.end = static_cast<uint32_t>(doc_.nodes_.size());
      return;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    static constexpr std::string_view kTrue = "true", kFalse = "false", kNull = "null";
    const std::string_view word = c == 't'   ? kTrue
                                  : c == 'f' ? kFalse
                                  : c == 'n' ? kNull
                                             : std::string_view();
    if (!word.empty()) {
      if (text_.compare(pos_, word.size(), word) != 0) {  // the first byte that differs, for the message
        size_t i = 1;
        while (pos_ + i < text_.size() && i < word.size() && text_[pos_ + i] == word[i]) ++i;
        fail_at(pos_ + i, "expected the literal " + std::string(word));
      }
      JsonDocument::Node& node = add(word == kNull ? JsonType::kNull : JsonType::kBool);
      node.flag = word == kTrue;
      pos_ += word.size();
      set_text(node, text_.substr(start, word.size()));
      node.end = static_cast<uint32_t>(doc_.nodes_.size());
      return;
    }
    fail("expected a value (an object, array, string, number, true, false or null)");
  }

  // A number at pos_, as a node.
  void number() {
    const char* const text = text_.data();
    JsonNumber value;
    const char* error_at = nullptr;
    const char* expected = nullptr;
    const char* const end =
        json_scan::scan_number(text + pos_, text + text_.size(), value, error_at, expected);
    if (end == nullptr) {
      if (expected != nullptr) fail_at(static_cast<size_t>(error_at - text), expected);
      const std::string_view written(text + pos_, static_cast<size_t>(error_at - (text + pos_)));
      fail_at(pos_, "a number within the range of a double (number overflow parsing '" +
                        text_prefix(written, 40) + "')");
    }
    const std::string_view written(text + pos_, static_cast<size_t>(end - (text + pos_)));
    pos_ += written.size();
    JsonDocument::Node& node = add(JsonType::kNumber);
    set_text(node, written);
    node.end = static_cast<uint32_t>(doc_.nodes_.size());
    node.kind = value.kind;
    node.number = value.value;
  }

  static bool clean8(const char* p) {  // 8 bytes of printable ASCII other than '"' and '\'
    uint64_t x;
    std::memcpy(&x, p, 8);
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    const auto zero_byte = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
    const uint64_t control = (x - kOnes * 0x20) & ~x & kHigh;  // a byte < 0x20 (exact for bytes < 0x80)
    return ((x & kHigh) | control | zero_byte(x ^ (kOnes * '"')) | zero_byte(x ^ (kOnes * '\\'))) == 0;
  }

  // Moves pos_ over printable ASCII other than '"' and '\' (to the first byte that needs a look, or near the
  // end). Messages are mostly long runs of such bytes: 16 at a time with SSE2 (every x86-64 has it; one
  // signed compare finds both control bytes and non-ASCII ones), then 8 at a time.
  void skip_clean() {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (pos_ + 16 <= text_.size()) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text_.data() + pos_));
      const __m128i special =
          _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                       _mm_cmplt_epi8(x, space));  // signed: < 0x20 or >= 0x80
      const int mask = _mm_movemask_epi8(special);
      if (mask != 0) {
        pos_ += static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
        return;
      }
      pos_ += 16;
    }
#endif
    while (pos_ + 8 <= text_.size() && clean8(text_.data() + pos_)) pos_ += 8;
  }

  // The string at pos_ (its opening quote); pos_ moves past the closing quote. A view into the text when it
  // holds no escape, else into the document's buffer of decoded strings.
  std::string_view string() {
    ++pos_;
    const size_t start = pos_;
    std::string* out = nullptr;  // set at the first escape
    size_t out_start = 0, run = start;
    while (true) {
      skip_clean();
      if (pos_ >= text_.size()) fail_at(pos_, "expected '\"' to end the string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        std::string_view value;
        if (out == nullptr) {
          value = text_.substr(start, pos_ - start);
        } else {
          out->append(text_.data() + run, pos_ - run);
          value = std::string_view(out->data() + out_start, out->size() - out_start);
        }
        ++pos_;
        return value;
      }
      if (c == '\\') {
        if (out == nullptr) {
          if (!doc_.unescaped_) {
            doc_.unescaped_ = std::make_unique<std::string>();
            doc_.unescaped_->reserve(text_.size());  // decoded strings are never longer: views stay valid
          }
          out = doc_.unescaped_.get();
          out_start = out->size();
        }
        out->append(text_.data() + run, pos_ - run);
        escape(*out);
        run = pos_;
        continue;
      }
      if (c < 0x20)
        fail("expected a character or an escape (control characters must be escaped in a string)");
      if (c < 0x80) {
        ++pos_;
        continue;
      }
      utf8();
    }
  }

  // One UTF-8 sequence at pos_, strictly well-formed (RFC 3629's table).
  void utf8() {
    size_t bad = 0;
    const size_t length = json_skim::utf8_sequence(text_.data() + pos_, text_.data() + text_.size(), bad);
    if (length == 0) fail_at(pos_ + bad, "expected well-formed UTF-8 in a string");
    pos_ += length;
  }

  unsigned hex4(size_t at) const {
    unsigned value = 0;
    for (size_t i = 0; i < 4; ++i) {
      const char h = at + i < text_.size() ? text_[at + i] : '\0';
      unsigned d;
      if (h >= '0' && h <= '9')
        d = static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f')
        d = static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        d = static_cast<unsigned>(h - 'A' + 10);
      else
        fail_at(at + i, "expected four hexadecimal digits after \\u");
      value = value * 16 + d;
    }
    return value;
  }

  // The escape at pos_ (its backslash), decoded onto `out`.
  void escape(std::string& out) {
    const size_t at = pos_;
    const char e = pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0';
    pos_ += 2;
    switch (e) {
      case '"':
        return void(out += '"');
      case '\\':
        return void(out += '\\');
      case '/':
        return void(out += '/');
      case 'b':
        return void(out += '\b');
      case 'f':
        return void(out += '\f');
      case 'n':
        return void(out += '\n');
      case 'r':
        return void(out += '\r');
      case 't':
        return void(out += '\t');
      case 'u':
        break;
      default:
        fail_at(at + 1, "expected an escape (one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
    }
    uint32_t code = hex4(pos_);
    pos_ += 4;
    if (code >= 0xDC00 && code <= 0xDFFF)
      fail_at(at, "a high surrogate (\\uD800-\\uDBFF) before a low one, not a lone low surrogate");
    if (code >= 0xD800 && code <= 0xDBFF) {
      if (pos_ + 1 >= text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u')
        fail_at(pos_, "expected a low surrogate (\\uDC00-\\uDFFF) after a high one");
      const uint32_t low = hex4(pos_ + 2);
      if (low < 0xDC00 || low > 0xDFFF)
        fail_at(pos_, "expected a low surrogate (\\uDC00-\\uDFFF) after a high one");
      pos_ += 6;
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    }
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  std::string_view text_;
  const std::string& where_;
  const int max_depth_;
  const JsonKnownMember* known_;
  std::span<JsonNumberRows> rows_;
  std::span<const std::string_view> unread_arrays_;
  JsonDocument& doc_;
  size_t pos_ = 0;
  // The open levels and their keys, kept per thread between parses: a small document (an LLM's answer)
  // otherwise paid more for these vectors' allocations than for its bytes. One parse runs at a time on a
  // thread (run() calls nothing that parses).
  struct Scratch {
    std::vector<Level> stack;
    std::vector<JsonObjectKeys> keys;  // by depth, reused
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }
  std::vector<Level>& stack_;
  std::vector<JsonObjectKeys>& keys_;
};

static_assert(sizeof(JsonDocument::Node) == 48, "the node layout the memory bound in json_view.h states");

namespace {
// One node array per thread kept between documents: a parse takes it (cleared, its capacity kept) and a
// document gives its own back when it ends, the larger of the two kept. Arrays above kMaxSpareNodes (192 KiB)
// go back to the heap, so a thread keeps little after a large document.
constexpr size_t kMaxSpareNodes = 4096;
std::vector<JsonDocument::Node>& spare_nodes() {
  thread_local std::vector<JsonDocument::Node> spare;
  return spare;
}
}  // namespace

JsonDocument::~JsonDocument() {
  std::vector<Node>& spare = spare_nodes();
  if (nodes_.capacity() > spare.capacity() && nodes_.capacity() <= kMaxSpareNodes) spare.swap(nodes_);
}

JsonDocument JsonDocument::parse(std::string_view text, const std::string& where, int max_depth,
                                 const JsonKnownMember* known, std::span<JsonNumberRows> rows,
                                 std::span<const std::string_view> unread_arrays) {
  JsonDocument doc;
  doc.nodes_.swap(spare_nodes());
  doc.nodes_.clear();
  if (known && (known->text.empty() || (known->text.front() != '[' && known->text.front() != '{')))
    known = nullptr;
  for (JsonNumberRows& r : rows) {
    r.text = {};
    r.matched = false;
    r.cells.clear();
    if (r.bracketed && r.numbers < 1) throw std::invalid_argument("JsonNumberRows: a row of no numbers");
    if (!r.expected.empty() && (r.bracketed || r.expected.front() != '[' || r.expected.back() != ']'))
      throw std::invalid_argument("JsonNumberRows: an expected text is an array of bare numbers");
  }
  JsonParser(text, where, max_depth, doc, known, rows, unread_arrays).run();
  return doc;
}

JsonDocument JsonDocument::parse_large(std::string_view text, const std::string& where) {
  JsonDocument doc;
  // Every value but the first follows a ',', '[' or '{' (commas in strings count too): the nodes, allocated
  // once on huge pages (engine/heap.h) rather than grown by doubling, each growth copying them all onto
  // fresh pages. At most a node per 8 bytes of text is allocated so (6 times the text: a file of commas in
  // one string gets no more; tokenizer.json files hold a value per 18 bytes or so), and a denser document
  // grows past it as any other.
  size_t separators = 0;
  for (const char c : text) separators += static_cast<size_t>((c == ',') | (c == '[') | (c == '{'));
  const size_t values = std::min(separators + 1, text.size() / 8 + 16);
  doc.nodes_.reserve(values);
  prefer_huge_pages(doc.nodes_.data(), values * sizeof(Node));
  JsonParser(text, where, kMaxJsonDepth, doc).run();
  return doc;
}

}  // namespace crl
