// The fast JSON reader (engine/json_view.h): hostile input, and a differential test against read_json
// (nlohmann's parser with the same limits) on many generated documents, valid and broken.
#include "engine/json_view.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "tests/fuzz/number_rows_check.h"

namespace crl {
namespace {

using nlohmann::json;

JsonErrorKind error_kind(std::string_view text, std::string* message = nullptr,
                         std::string* field = nullptr) {
  try {
    JsonDocument::parse(text, "test");
  } catch (const JsonError& e) {
    if (message) *message = e.what();
    if (field) *field = e.field();
    return e.kind();
  }
  ADD_FAILURE() << "accepted: " << text_prefix(text, 80);
  return JsonErrorKind::kSyntax;
}

TEST(JsonView, ReadsValuesAsViewsIntoTheText) {
  const std::string text = R"( {"a": [1, -2, 3.5, true, null, "x"], "b": {"c": "plain"}, "e": ""} )";
  const JsonDocument doc = JsonDocument::parse(text, "test");
  const JsonView root = doc.root();
  ASSERT_TRUE(root.is_object());
  EXPECT_EQ(root.size(), 3u);
  const JsonView a = root.find("a");
  ASSERT_TRUE(a.is_array());
  EXPECT_EQ(a.size(), 6u);
  std::vector<JsonView> items(a.begin(), a.end());
  ASSERT_EQ(items.size(), 6u);
  EXPECT_EQ(items[0].number_kind(), JsonNumberKind::kUnsigned);
  EXPECT_EQ(items[0].integer(), 1);
  EXPECT_EQ(items[1].number_kind(), JsonNumberKind::kSigned);
  EXPECT_EQ(items[1].integer(), -2);
  EXPECT_FALSE(items[2].is_integer());
  EXPECT_EQ(items[2].number(), 3.5);
  EXPECT_TRUE(items[3].boolean());
  EXPECT_TRUE(items[4].is_null());
  EXPECT_EQ(items[5].string(), "x");
  const std::string_view plain = root.find("b").find("c").string();
  EXPECT_EQ(plain, "plain");
  EXPECT_GE(plain.data(), text.data());  // a view into the text: no copy
  EXPECT_LT(plain.data(), text.data() + text.size());
  EXPECT_EQ(root.find("b").raw(), R"({"c": "plain"})");
  EXPECT_EQ(root.find("e").string(), "");
  EXPECT_FALSE(root.find("missing").exists());
  EXPECT_TRUE(root.find("missing").is_none());
  EXPECT_FALSE(a.find("a").exists());  // not an object
  EXPECT_THROW(a.string(), Error);
}

TEST(JsonView, DecodesEscapesAndSurrogatePairs) {
  const JsonDocument doc = JsonDocument::parse(
      R"(["a\"b\\c\/d\b\f\n\r\t", "\u00e9\u20AC\ud83d\ude00", "\u0000x", "é€😀"])", "test");
  std::vector<JsonView> items(doc.root().begin(), doc.root().end());
  EXPECT_EQ(items[0].string(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(items[1].string(), "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  EXPECT_EQ(items[2].string(), std::string_view("\0x", 2));
  EXPECT_EQ(items[3].string(), "é€😀");
}

TEST(JsonView, RefusesHostileInputWithTheOffsetAndWhatWasExpected) {
  std::string message;
  EXPECT_EQ(error_kind(R"({"a": 1, "b" 2})", &message), JsonErrorKind::kSyntax);
  EXPECT_NE(message.find("byte 13"), std::string::npos) << message;
  EXPECT_NE(message.find("expected ':' after an object key, found '2'"), std::string::npos) << message;
  // Truncated documents, at every cut.
  const std::string whole =
      R"({"messages": [{"role": "user", "content": "h\u00e9llo \ud83d\ude00"}], "n": -1.5e3})";
  ASSERT_NO_THROW(JsonDocument::parse(whole, "test"));
  for (size_t cut = 0; cut < whole.size(); ++cut)
    EXPECT_EQ(error_kind(whole.substr(0, cut)), JsonErrorKind::kSyntax);
  for (const char* bad : {
           "",
           " ",
           "{",
           "[1,]",
           "[1 2]",
           "{\"a\":}",
           "{\"a\" 1}",
           "{,}",
           "{\"a\":1,}",
           "{1:2}",
           "[01]",
           "[1.]",
           "[.5]",
           "[1e]",
           "[-]",
           "[+1]",
           "[0x10]",
           "[NaN]",
           "[Infinity]",
           "[tru]",
           "[nul]",
           "[True]",
           "\"\\x\"",
           "\"\\u12G4\"",
           "\"\\u12\"",
           "\"abc",
           "\"a\tb\"",
           "\"\\ud800\"",
           "\"\\ud800x\"",
           "\"\\ud800\\u0041\"",
           "\"\\udc00\"",
           "\"\\udfff\\ud800\"",
           "[1] [2]",
           "{} x",
           "1 2",
           "[1]]",
           "\"\xC0\xAF\"",          // overlong '/'
           "\"\xE0\x80\xAF\"",      // overlong
           "\"\xED\xA0\x80\"",      // an encoded surrogate
           "\"\xF4\x90\x80\x80\"",  // above U+10FFFF
           "\"\xF5\x80\x80\x80\"",
           "\"\x80\"",
           "\"\xC3\"",
           "\"\xE2\x82\"",
           "\"\xFF\"",
           "[1e400]",
           "[-1e400]",  // overflow (nlohmann: number overflow)
       }) {
    EXPECT_EQ(error_kind(bad), JsonErrorKind::kSyntax) << bad;
  }
  // NUL bytes: outside a string, inside one unescaped, after the value.
  EXPECT_EQ(error_kind(std::string("[1,\0 2]", 7)), JsonErrorKind::kSyntax);
  EXPECT_EQ(error_kind(std::string("\"a\0b\"", 5)), JsonErrorKind::kSyntax);
  EXPECT_EQ(error_kind(std::string("{}\0", 3), &message), JsonErrorKind::kSyntax);
  EXPECT_NE(message.find("byte 0x00"), std::string::npos) << message;
}

// Long strings are scanned 16 and 8 bytes at a time: a byte that needs a look (an escape, a quote, a control
// byte, non-ASCII) is found at every offset of strings of every length around those widths, decoded as
// read_json decodes it, and a refused byte is named by its exact offset.
TEST(JsonView, FindsEverySpecialByteAtEveryOffsetOfALongString) {
  for (size_t length = 1; length <= 50; ++length) {
    for (size_t at = 0; at < length; ++at) {
      for (const std::string_view special : {"\\n", "\\\"", "\xC3\xA9", "\xF0\x9F\x98\x80", "\x7f"}) {
        std::string text =
            "[\"" + std::string(at, 'a') + std::string(special) + std::string(length - at, 'b') + "\"]";
        const JsonDocument doc = JsonDocument::parse(text, "test");
        EXPECT_EQ(std::string((*doc.root().begin()).string()), read_json(text, "test")[0].get<std::string>())
            << "length " << length << ", offset " << at << ", " << special;
      }
      for (const char bad : {'\x01', '\x1f', '\xff', '\x80'}) {
        const std::string text = "[\"" + std::string(at, 'a') + bad + std::string(length - at, 'b') + "\"]";
        std::string message;
        error_kind(text, &message);
        EXPECT_NE(message.find("(byte " + std::to_string(2 + at) + ")"), std::string::npos)
            << "length " << length << ", offset " << at << ": " << message;
      }
    }
    // Without an escape the value is a view into the text, whatever its length.
    const std::string text = "[\"" + std::string(length, 'q') + "\"]";
    const JsonDocument doc = JsonDocument::parse(text, "test");
    EXPECT_EQ((*doc.root().begin()).string().data(), text.data() + 2);
  }
}

TEST(JsonView, NumbersAreExact) {
  const JsonDocument doc = JsonDocument::parse(
      "[18446744073709551615, 18446744073709551616, -9223372036854775808, -9223372036854775809, -0, "
      "0.1, 1e-400, 4.9406564584124654e-324, 123456789012345678901234567890, 1E2, 10000000000000000000, "
      "99999999999999999999]",
      "test");
  std::vector<JsonView> n(doc.root().begin(), doc.root().end());
  EXPECT_EQ(n[0].number_kind(), JsonNumberKind::kUnsigned);
  EXPECT_EQ(static_cast<uint64_t>(n[0].integer()), UINT64_MAX);
  EXPECT_EQ(n[1].number_kind(), JsonNumberKind::kFloat);  // beyond 64 bits: a double, as nlohmann
  EXPECT_EQ(n[1].number(), 18446744073709551616.0);
  EXPECT_EQ(n[2].integer(), INT64_MIN);
  EXPECT_EQ(n[3].number_kind(), JsonNumberKind::kFloat);
  EXPECT_EQ(n[4].number_kind(), JsonNumberKind::kSigned);
  EXPECT_EQ(n[4].integer(), 0);
  EXPECT_EQ(n[5].number(), 0.1);
  EXPECT_EQ(n[6].number(), 0.0);  // underflow rounds to zero (strtod), as nlohmann
  EXPECT_EQ(n[7].number(), 4.9406564584124654e-324);
  EXPECT_EQ(n[8].number(), 123456789012345678901234567890.0);
  EXPECT_EQ(n[9].number(), 100.0);
  EXPECT_EQ(n[9].number_kind(), JsonNumberKind::kFloat);
  // Twenty digits: the first count that may overflow 64 bits.
  EXPECT_EQ(n[10].number_kind(), JsonNumberKind::kUnsigned);
  EXPECT_EQ(static_cast<uint64_t>(n[10].integer()), 10000000000000000000ull);
  EXPECT_EQ(n[11].number_kind(), JsonNumberKind::kFloat);
  EXPECT_EQ(n[11].number(), 99999999999999999999.0);
}

// Fractions are scanned eight digits at a time, then one at a time: every length reads back as strtod
// reads it, a byte that ends the digits is found at every offset, and literals are refused at the first
// byte that differs.
TEST(JsonView, FractionsOfEveryLengthAndLiteralsAreReadExactly) {
  for (size_t digits = 1; digits <= 24; ++digits) {
    std::string written = "-0.";
    for (size_t i = 0; i < digits; ++i) written += static_cast<char>('1' + (i * 7) % 9);
    const JsonDocument doc = JsonDocument::parse("[" + written + "]", "test");
    EXPECT_EQ((*doc.root().begin()).number(), std::strtod(written.c_str(), nullptr)) << written;
    for (const char end : {'x', ':', '/'}) {  // (':' and '/' border the digits in ASCII)
      std::string message;
      EXPECT_EQ(error_kind("[" + written + end + "1234567]", &message), JsonErrorKind::kSyntax) << written;
      EXPECT_NE(message.find("(byte " + std::to_string(1 + written.size()) + ")"), std::string::npos)
          << message;
      EXPECT_NE(message.find(std::string("found '") + end + "'"), std::string::npos) << message;
    }
  }
  for (const auto& [text, byte] : std::vector<std::pair<std::string, int>>{
           {"[tru]", 4}, {"[trUe]", 3}, {"[nulL]", 4}, {"[fals", 5}, {"[t", 2}, {"[nil]", 2}}) {
    std::string message;
    EXPECT_EQ(error_kind(text, &message), JsonErrorKind::kSyntax) << text;
    EXPECT_NE(message.find("(byte " + std::to_string(byte) + "): expected the literal"), std::string::npos)
        << text << ": " << message;
  }
}

TEST(JsonView, DepthLimitAndDuplicateKeysNameThePath) {
  std::string message, field;
  std::string deep(64, '[');
  deep += std::string(64, ']');
  EXPECT_NO_THROW(JsonDocument::parse(deep, "test"));
  EXPECT_EQ(error_kind("[" + deep + "]", &message, &field), JsonErrorKind::kTooDeep);
  // 100,000 levels: refused at level 65, no recursion, no crash.
  EXPECT_EQ(error_kind(std::string(100000, '['), &message), JsonErrorKind::kTooDeep);
  EXPECT_EQ(error_kind(R"({"a": {"b": [0, {"c": 1, "c": 2}]}})", &message, &field),
            JsonErrorKind::kDuplicateKey);
  EXPECT_EQ(field, "a.b[1].c");
  EXPECT_NE(message.find("duplicate key \"c\" at a.b[1].c"), std::string::npos) << message;
  // The same key after unescaping; the empty key; and a large object (the hashed check).
  EXPECT_EQ(error_kind(R"({"ab": 1, "a\u0062": 2})"), JsonErrorKind::kDuplicateKey);
  EXPECT_EQ(error_kind(R"({"": 1, "": 2})", nullptr, &field), JsonErrorKind::kDuplicateKey);
  EXPECT_EQ(field, "");
  std::string big = "{";
  for (int i = 0; i < 5000; ++i) big += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  EXPECT_NO_THROW(JsonDocument::parse(big.substr(0, big.size() - 1) + "}", "test"));
  EXPECT_EQ(error_kind(big + "\"k4321\":0}", nullptr, &field), JsonErrorKind::kDuplicateKey);
  EXPECT_EQ(field, "k4321");
  // In the hashed check too, keys are compared decoded; the empty key is a key.
  EXPECT_EQ(error_kind(big + "\"k\\u0034321\":0}", nullptr, &field), JsonErrorKind::kDuplicateKey);
  EXPECT_EQ(field, "k4321");
  EXPECT_NO_THROW(JsonDocument::parse(big + "\"\":0}", "test"));
  EXPECT_EQ(error_kind(big + "\"\":0,\"\":1}", nullptr, &field), JsonErrorKind::kDuplicateKey);
  // The same keys in sibling objects are fine.
  EXPECT_NO_THROW(JsonDocument::parse(R"([{"a": 1}, {"a": 2}, {"b": {"a": 3}, "a": 4}])", "test"));
}

// The parser's levels and key lists are kept per thread between parses: a parse that failed half-way
// (deep, inside a large object's hashed keys) leaves nothing that changes the next one's answer.
TEST(JsonView, AFailedParseLeavesNothingBehindForTheNext) {
  std::string big = "{\"o\": {";
  for (int i = 0; i < 40; ++i) big += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  EXPECT_EQ(error_kind(big + "\"k7\": [[[{\"x\": 1,"), JsonErrorKind::kDuplicateKey);
  EXPECT_EQ(error_kind(std::string(70, '[')), JsonErrorKind::kTooDeep);
  EXPECT_EQ(error_kind(R"({"a": {"b": [{"c": 1,)"), JsonErrorKind::kSyntax);
  // The same keys at the same depths, now in fresh objects: accepted; and a duplicate is still one.
  EXPECT_NO_THROW(JsonDocument::parse(R"({"o": {"k7": 1, "c": {"x": 1}}, "a": {"b": [{"c": 1}]}})", "test"));
  std::string field;
  EXPECT_EQ(error_kind(R"({"o": {"k1": 1, "k1": 2}})", nullptr, &field), JsonErrorKind::kDuplicateKey);
  EXPECT_EQ(field, "o.k1");
  const JsonDocument doc = JsonDocument::parse(R"([1, {"a": [2, 3]}, 4])", "test");
  ASSERT_EQ(doc.root().size(), 3u);
  EXPECT_EQ(doc.root().find("a").exists(), false);
  size_t count = 0;
  for (const JsonView v : doc.root()) count += v.is_number() ? 1 : v.find("a").size();
  EXPECT_EQ(count, 4u);
}

// Node arrays go from an ended document to the next parse on the thread: documents alive together, ended in
// either order, each keep their own values.
TEST(JsonView, DocumentsAliveTogetherKeepTheirOwnNodes) {
  for (int round = 0; round < 3; ++round) {
    auto a = std::make_unique<JsonDocument>(JsonDocument::parse(R"({"a": [1, 2, 3]})", "a"));
    const JsonDocument b = JsonDocument::parse(R"({"b": {"c": "x"}})", "b");
    if (round == 1) a.reset();  // a's array goes back first; c then takes it
    std::string many = "[0";
    for (int i = 1; i < 2000; ++i) many += "," + std::to_string(i);
    const JsonDocument c = JsonDocument::parse(many + "]", "c");
    EXPECT_EQ(b.root().find("b").find("c").string(), "x");
    ASSERT_EQ(c.root().size(), 2000u);
    EXPECT_EQ(c.root().find("x").exists(), false);
    int64_t sum = 0;
    for (const JsonView v : c.root()) sum += v.integer();
    EXPECT_EQ(sum, 1999 * 2000 / 2);
    if (a) {
      EXPECT_EQ(a->root().find("a").size(), 3u);
    }
  }
}

// ---- differential test against read_json (nlohmann) ----

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  std::string document() {
    std::string out;
    value(out, 0);
    return out;
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  void space(std::string& out) {
    static const char* kSpace[] = {"", "", "", " ", "\n", "\t", "\r\n  "};
    out += kSpace[pick(7)];
  }
  void string(std::string& out) {
    static const char* kPieces[] = {"a",       "key",  "é",   "€",        "😀",       "\\n",
                                    "\\\"",    "\\\\", "\\/", "\\u00e9",  "\\u0000", "\\ud83d\\ude00",
                                    "\\uFFFF", "\\t",  " ",   "messages", "\\u20ac", "\x7f",
                                    "z"};
    out += '"';
    const size_t n = pick(6);
    for (size_t i = 0; i < n; ++i) out += kPieces[pick(std::size(kPieces))];
    out += '"';
  }
  void number(std::string& out) {
    static const char* kNumbers[] = {"0",
                                     "-0",
                                     "1",
                                     "-1",
                                     "42",
                                     "3.25",
                                     "-0.5",
                                     "1e3",
                                     "1E-3",
                                     "2.5e+10",
                                     "1e308",
                                     "1e-320",
                                     "18446744073709551615",
                                     "18446744073709551616",
                                     "-9223372036854775808",
                                     "-9223372036854775809",
                                     "0.1",
                                     "123456789.987654321",
                                     "5e-324",
                                     "1.7976931348623157e308",
                                     "100000000000000000000000"};
    out += kNumbers[pick(std::size(kNumbers))];
  }
  void value(std::string& out, int depth) {
    space(out);
    const size_t kind = depth > 6 ? pick(4) : pick(7);
    switch (kind) {
      case 0:
        string(out);
        break;
      case 1:
        number(out);
        break;
      case 2:
        out += pick(2) ? "true" : "false";
        break;
      case 3:
        out += "null";
        break;
      case 4:
      case 5: {
        out += '[';
        const size_t n = pick(5);
        for (size_t i = 0; i < n; ++i) {
          if (i) out += ',';
          value(out, depth + 1);
        }
        space(out);
        out += ']';
        break;
      }
      default: {
        out += '{';
        const size_t n = pick(5);
        for (size_t i = 0; i < n; ++i) {
          if (i) out += ',';
          space(out);
          if (pick(4) == 0)
            string(out);  // sometimes a repeated key
          else
            out += "\"k" + std::to_string(i) + "\"";
          space(out);
          out += ':';
          value(out, depth + 1);
        }
        space(out);
        out += '}';
      }
    }
    space(out);
  }
  std::mt19937_64 rng_;
};

// Mutations that break documents in the ways an attacker would.
std::string mutate(std::string text, std::mt19937_64& rng) {
  if (text.empty()) return text;
  static const char* kInserts[] = {"\"",    "\\",
                                   ",",     "]",
                                   "}",     "[",
                                   "{",     ":",
                                   "\\u",   "\\ud800",
                                   "\xC3",  "\xED\xA0\x80",
                                   "\x01",  std::string_view("\0", 1).data(),
                                   "1e999", "-",
                                   "tru"};
  const size_t at = std::uniform_int_distribution<size_t>(0, text.size() - 1)(rng);
  switch (rng() % 4) {
    case 0:
      return text.substr(0, at);  // truncated
    case 1:
      return text.erase(at, 1);
    case 2: {
      const char* insert = kInserts[rng() % std::size(kInserts)];
      return text.insert(at, insert, std::max<size_t>(1, std::strlen(insert)));
    }
    default:
      text[at] = static_cast<char>(rng() % 256);
      return text;
  }
}

TEST(JsonView, AgreesWithReadJsonOnGeneratedDocuments) {
  Generator generator(20261202);
  std::mt19937_64 rng(7);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = generator.document();
    if (i % 2 == 1) text = mutate(text, rng);
    std::optional<json> reference;
    std::optional<JsonErrorKind> reference_error;
    try {
      reference = read_json(text, "test", 8);
    } catch (const JsonError& e) {
      reference_error = e.kind();
    }
    try {
      const JsonDocument doc = JsonDocument::parse(text, "test", 8);
      ASSERT_TRUE(reference.has_value()) << "accepted what read_json refuses: " << text;
      ASSERT_EQ(doc.root().to_json().dump(), reference->dump()) << text;
      ++accepted;
    } catch (const JsonError& e) {
      // nlohmann's lexer takes a NUL byte for the end of the input, so read_json accepts "[1]\0 garbage";
      // this reader refuses it (the only place where it is stricter, on purpose).
      if (reference && text.find('\0') != std::string::npos) {
        ++refused;
        continue;
      }
      ASSERT_TRUE(reference_error.has_value()) << "refused what read_json accepts: " << text << "\n"
                                               << e.what();
      ASSERT_EQ(static_cast<int>(e.kind()), static_cast<int>(*reference_error)) << text << "\n" << e.what();
      ++refused;
    }
  }
  EXPECT_GT(accepted, 8000);  // both halves are exercised
  EXPECT_GT(refused, 4000);
}

// parse_large (a tokenizer.json's reader: nodes counted and allocated at once) reads what parse reads:
// generated and mutated documents, a dense array past its allocation (a value per 2 bytes: the nodes grow),
// a file of commas inside one string (an allocation capped at a node per 8 bytes), a large object with a
// duplicate key at its end.
TEST(JsonView, ParseLargeReadsWhatParseReads) {
  const auto same = [](const std::string& text) {
    std::string plain_error, large_error, plain_dump, large_dump;
    try {
      plain_dump = JsonDocument::parse(text, "test").root().to_json().dump();
    } catch (const JsonError& e) {
      plain_error = e.what();
    }
    try {
      large_dump = JsonDocument::parse_large(text, "test").root().to_json().dump();
    } catch (const JsonError& e) {
      large_error = e.what();
    }
    EXPECT_EQ(plain_error, large_error) << text.substr(0, 200);
    EXPECT_EQ(plain_dump, large_dump) << text.substr(0, 200);
  };
  Generator generator(20261207);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::string text = generator.document();
    if (i % 2 == 1) text = mutate(text, rng);
    same(text);
  }
  std::string dense = "[0";
  for (int i = 0; i < 1'500'000; ++i) dense += ",0";
  dense += "]";
  same(dense);
  EXPECT_EQ(JsonDocument::parse_large(dense, "test").root().size(), 1'500'001u);
  same("[\"" + std::string(3'000'000, ',') + "\"]");
  std::string big = "{";
  for (int i = 0; i < 200'000; ++i) big += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  same(big.substr(0, big.size() - 1) + "}");
  same(big + "\"k123456\":0}");
  EXPECT_THROW(JsonDocument::parse_large(big + "\"k123456\":0}", "test"), JsonError);
}

// A text read twice: plainly, and with a JsonKnownMember (each read's document or error).
struct TwoReads {
  std::optional<JsonDocument> plain, with;
  std::string plain_error, with_error;
};
TwoReads read_twice(const std::string& text, const JsonKnownMember* known) {
  TwoReads out;
  try {
    out.plain = JsonDocument::parse(text, "test", 8);
  } catch (const JsonError& e) {
    out.plain_error = e.what();
  }
  try {
    out.with = JsonDocument::parse(text, "test", 8, known);
  } catch (const JsonError& e) {
    out.with_error = e.what();
  }
  return out;
}

// A root member known by its text (JsonKnownMember): {"a": A, "tools": T, "b": B} with T an array or object,
// read with T known and without, T or its surroundings often broken. The two reads accept and refuse the
// same documents with the same errors; an accepted one has the same values but for T, whose node holds T's
// text (the same as the other read's raw()) and no elements: reading them throws.
TEST(JsonView, AKnownMemberIsStoredUnreadAndChangesNothingElse) {
  Generator generator(20261206);
  std::mt19937_64 rng(11);
  int skipped = 0, read = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    // T: an array or object accepted before as the member of a root object (the contract).
    std::string tools;
    while (true) {
      tools = generator.document();
      const size_t first = tools.find_first_not_of(" \t\r\n");
      if (first == std::string::npos || (tools[first] != '[' && tools[first] != '{')) continue;
      tools = tools.substr(first, tools.find_last_not_of(" \t\r\n") + 1 - first);
      try {
        JsonDocument::parse("{\"tools\": " + tools + "}", "test", 8);
        break;
      } catch (const JsonError&) {
      }
    }
    std::string text = "{\"a\": " + generator.document() + ", \"tools\":" + (i % 3 ? " " : "") + tools +
                       (i % 5 ? "," : " ,") + " \"b\": " + generator.document() + "}";
    if (i % 2 == 1) text = mutate(text, rng);
    if (const size_t key = text.find("\"tools\":"); i % 7 == 3 && key != std::string::npos)
      text.insert(key + 8, "\n");  // spaces before the value
    const JsonKnownMember known{"tools", tools};
    auto [plain, with, plain_error, with_error] = read_twice(text, &known);
    ASSERT_EQ(plain.has_value(), with.has_value()) << text << "\n" << plain_error << with_error;
    if (!plain) {
      ASSERT_EQ(plain_error, with_error) << text;
      ++refused;
      continue;
    }
    const JsonView p = plain->root(), w = with->root();
    ASSERT_EQ(p.raw(), w.raw());
    for (const char* key : {"a", "b"}) ASSERT_EQ(p.find(key).to_json(), w.find(key).to_json()) << text;
    const JsonView t = w.find("tools");
    ASSERT_EQ(t.exists(), p.find("tools").exists()) << text;
    if (!t.exists()) {  // a mutation renamed it
      ASSERT_EQ(w.to_json(), p.to_json()) << text;
      ++read;
      continue;
    }
    ASSERT_EQ(t.raw(), p.find("tools").raw()) << text;
    ASSERT_EQ(t.type(), p.find("tools").type());
    bool unread = false;
    for (const JsonDocument::Node& node : with->nodes()) unread |= node.unread;
    // (a broken document may hold "tools" twice in other objects; the root's is the one found here)
    ASSERT_EQ(unread, t.raw() == tools) << text;
    if (unread) {
      EXPECT_THROW(t.size(), std::logic_error);
      EXPECT_THROW(t.begin(), std::logic_error);
      EXPECT_THROW(t.to_json(), std::logic_error);
      ++skipped;
    } else {
      ASSERT_EQ(t.to_json(), p.find("tools").to_json()) << text;
      ++read;
    }
  }
  EXPECT_GT(skipped, 5000);
  EXPECT_GT(read, 500);
  EXPECT_GT(refused, 4000);
}

TEST(JsonView, AKnownMemberIsOnlyTheRootObjectsAndOnlyAnArrayOrObject) {
  const JsonKnownMember known{"tools", "[1,2]"};
  // Deeper, or the root an array: read as usual.
  const JsonDocument deeper = JsonDocument::parse(R"({"x": {"tools": [1,2]}})", "test", 8, &known);
  EXPECT_EQ(deeper.root().find("x").find("tools").size(), 2u);
  const JsonDocument list = JsonDocument::parse(R"([[1,2]])", "test", 8, &known);
  EXPECT_EQ(list.root().size(), 1u);
  // Another key, or a longer value: read as usual.
  EXPECT_EQ(JsonDocument::parse(R"({"other": [1,2]})", "test", 8, &known).root().find("other").size(), 2u);
  EXPECT_EQ(JsonDocument::parse(R"({"tools": [1,2,3]})", "test", 8, &known).root().find("tools").size(), 3u);
  // A known text that is not an array or object is not used.
  const JsonKnownMember number{"tools", "12"};
  EXPECT_EQ(JsonDocument::parse(R"({"tools": 123})", "test", 8, &number).root().find("tools").integer(), 123);
  // The same text: unread, and a duplicate key is still one.
  const JsonDocument same = JsonDocument::parse(R"({"tools": [1,2]})", "test", 8, &known);
  EXPECT_THROW(same.root().find("tools").size(), std::logic_error);
  EXPECT_EQ(same.root().find("tools").raw(), "[1,2]");
  EXPECT_EQ(error_kind(R"({"tools": [1,2], "tools": [1,2]})"), JsonErrorKind::kDuplicateKey);
  try {
    JsonDocument::parse(R"({"tools": [1,2], "tools": [1,2]})", "test", 8, &known);
    ADD_FAILURE() << "accepted a duplicate key";
  } catch (const JsonError& e) {
    EXPECT_EQ(e.kind(), JsonErrorKind::kDuplicateKey);
  }
}

// ---- JsonNumberRows: an LLM answer's per-token lists read as rows of numbers ----

std::vector<JsonNumberRows> answer_rows() {
  std::vector<JsonNumberRows> rows(2);
  rows[0].key = "output_ids";
  rows[1].key = "output_token_logprobs";
  rows[1].bracketed = true;
  rows[1].numbers = 2;
  rows[1].nulls = 1;
  return rows;
}

// An SGLang-shaped answer whose per-token lists are often of another shape than the rows asked (a text
// where null was, a missing or extra field, a string, spaces, numbers JSON refuses or a double overflows),
// sometimes with the same keys elsewhere first.
std::string answer_document(Generator& generator, std::mt19937_64& rng) {
  static const char* kNumbers[] = {
      "0",  "12", "-3",   "151643", "-0.10000000149011612", "-1.5e-7", "2E+2", "1e999", "-",
      "01", "1.", "-0.0", "1e400",  "18446744073709551616"};
  static const char* kSpaces[] = {"", "", "", "", " ", "\n ", "\t"};
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const auto space = [&] { return std::string(kSpaces[pick(std::size(kSpaces))]); };
  const auto number = [&] { return pick(6) == 0 ? kNumbers[pick(std::size(kNumbers))] : kNumbers[pick(5)]; };
  const auto odd = [&]() -> std::string {  // something that is not a number
    static const char* kOdd[] = {"\"t\"", "null", "[1]", "true", "{}"};
    return kOdd[pick(std::size(kOdd))];
  };
  const size_t n = pick(6);
  std::string ids = "[" + space();
  for (size_t i = 0; i < n; ++i) {
    if (i) ids += space() + "," + space();
    ids += pick(30) == 0 ? odd() : number();
  }
  ids += space() + "]";
  std::string logprobs = "[" + space();
  for (size_t i = 0; i < n; ++i) {
    if (i) logprobs += space() + "," + space();
    std::string row = "[" + space() + number() + space() + "," + space() + number();
    switch (pick(12)) {
      case 0:
        row += ",\"tok\"";  // return_text_in_logprobs
        break;
      case 1:
        break;  // two fields
      case 2:
        row += ",null,4";
        break;
      case 3:
        row = "[" + odd() + "," + number() + ",null";
        break;
      default:
        row += space() + "," + space() + "null";
    }
    logprobs += row + space() + "]";
  }
  logprobs += space() + "]";
  std::string decoy;  // the same key deeper and before: the first in document order is the one taken
  if (pick(8) == 0) decoy = R"(, "d": {"output_ids": [7, 8]})";
  return "{\"a\":" + generator.document() + decoy + ",\"output_ids\":" + space() + ids +
         ",\"meta_info\":{\"output_token_logprobs\":" + logprobs + ",\"b\":" + generator.document() + "}}";
}

// Read with rows asked and without, the documents (often broken) are accepted and refused alike, with the
// same error; an accepted one has the same values, a taken array's in its rows.
TEST(JsonNumberRows, ChangeNothingButWhereTheNumbersAreKept) {
  Generator generator(20261207);
  std::mt19937_64 rng(13);
  std::vector<JsonNumberRows> rows = answer_rows();
  int taken = 0, shaped_otherwise = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = answer_document(generator, rng);
    if (i % 3 == 1) text = mutate(text, rng);
    const testing::RowsReading reading = testing::read_with_and_without_rows(text, rows, 8);
    ASSERT_EQ(reading.difference, "") << text;
    if (!reading.accepted) {
      ++refused;
      continue;
    }
    taken += reading.taken;
    shaped_otherwise += static_cast<int>(rows.size()) - reading.taken;
  }
  EXPECT_GT(taken, 10000);
  EXPECT_GT(shaped_otherwise, 2000);
  EXPECT_GT(refused, 3000);
}

TEST(JsonNumberRows, ATakenArrayIsOneUnreadNodeAndTheReaderKnowsIt) {
  std::vector<JsonNumberRows> rows = answer_rows();
  const std::string text =
      R"({"output_ids":[5,6],"meta_info":{"output_token_logprobs":[[-0.5,5,null],[ -1e-3 , 6 , null ]]}})";
  const JsonDocument doc = JsonDocument::parse(text, "test", kMaxJsonDepth, nullptr, rows);
  const JsonView ids = doc.root().find("output_ids");
  const JsonView logprobs = doc.root().find("meta_info").find("output_token_logprobs");
  ASSERT_TRUE(rows[0].taken(ids));
  ASSERT_TRUE(rows[1].taken(logprobs));
  EXPECT_FALSE(rows[0].taken(logprobs));
  EXPECT_EQ(ids.raw(), "[5,6]");
  EXPECT_THROW(ids.size(), std::logic_error);
  EXPECT_THROW(logprobs.begin(), std::logic_error);
  ASSERT_EQ(rows[0].rows(), 2u);
  ASSERT_EQ(rows[1].rows(), 2u);
  EXPECT_EQ(rows[0].cells[1].as_integer(), 6);
  EXPECT_EQ(rows[1].cells[0].as_double(), -0.5);
  EXPECT_EQ(rows[1].cells[2].kind, JsonNumberKind::kFloat);
  EXPECT_EQ(rows[1].cells[2].as_double(), -1e-3);
  EXPECT_EQ(rows[1].cells[3].as_integer(), 6);
  EXPECT_EQ(doc.nodes().size(), 4u);  // root, the two taken arrays, meta_info: no node per number

  // The next parse clears what the last one took; an array of another shape is read as usual.
  const JsonDocument text_in_logprobs = JsonDocument::parse(
      R"({"output_ids":[5],"meta_info":{"output_token_logprobs":[[-0.5,5,"a"]]}})", "test", 8, nullptr, rows);
  EXPECT_TRUE(rows[0].taken(text_in_logprobs.root().find("output_ids")));
  EXPECT_TRUE(rows[1].text.empty());
  EXPECT_EQ(text_in_logprobs.root().find("meta_info").find("output_token_logprobs").size(), 1u);
  // Empty arrays are taken, with no rows; a root that is the array itself is never taken (no key).
  const JsonDocument empty = JsonDocument::parse(R"({"output_ids": [ ]})", "test", 8, nullptr, rows);
  EXPECT_TRUE(rows[0].taken(empty.root().find("output_ids")));
  EXPECT_EQ(rows[0].rows(), 0u);
  const JsonDocument root = JsonDocument::parse("[1,2]", "test", 8, nullptr, rows);
  EXPECT_EQ(root.root().size(), 2u);
}

// An expected text (the id list a caller sent, answered back) is taken where the array's bytes are it,
// without reading its numbers; anything else (a digit changed, spaces, an id more or less, bytes after it
// that break the document, an array too deep) is read as it would be without it: accepted or refused alike,
// with the same error, and the same values.
TEST(JsonNumberRows, AnExpectedTextIsTakenWhereTheBytesAreItAndChangesNothingElse) {
  Generator generator(20261208);
  std::mt19937_64 rng(17);
  const auto pick = [&rng](uint64_t n) { return rng() % n; };
  int matched = 0, read = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string sent = "[";
    const size_t n = 1 + pick(40);
    for (size_t k = 0; k < n; ++k) sent += (k ? "," : "") + std::to_string(pick(k % 3 == 0 ? 10 : 151643));
    sent += "]";
    std::string answered = sent;
    switch (pick(8)) {
      case 0:  // a digit changed
        for (char& c : answered) {
          if (std::isdigit(static_cast<unsigned char>(c)) && pick(4) == 0) {
            c = c == '9' ? '8' : static_cast<char>(c + 1);
            break;
          }
        }
        break;
      case 1:  // spaces
        answered = "[ " + answered.substr(1, answered.size() - 2) + " ]";
        break;
      case 2:  // an id more
        answered.insert(answered.size() - 1, ",7");
        break;
      case 3:  // an id less, or none
        answered = n == 1 ? "[]" : answered.substr(0, answered.rfind(',')) + "]";
        break;
      case 4:
        answered = mutate(answered, rng);
        break;
      default:
        break;
    }
    std::string tail = pick(6) == 0 ? mutate("}]}", rng) : "}]}";
    const bool deep = pick(10) == 0;
    const std::string text = "{\"a\":" + generator.document() + ",\"choices\":[{\"token_ids\":[1]," +
                             (deep ? "\"x\":{\"prompt_token_ids\":" : "\"prompt_token_ids\":") + answered +
                             (deep ? "}" : "") + tail;
    std::vector<JsonNumberRows> rows(1);
    rows[0].key = "prompt_token_ids";
    rows[0].expected = sent;
    const testing::RowsReading reading = testing::read_with_and_without_rows(text, rows, deep ? 4 : 5);
    ASSERT_EQ(reading.difference, "") << text << " sent " << sent;
    if (!reading.accepted) {
      ++refused;
      continue;
    }
    ASSERT_EQ(rows[0].matched, answered.starts_with(sent) && !deep) << text;
    if (rows[0].matched) {
      EXPECT_EQ(rows[0].text, sent);
      EXPECT_TRUE(rows[0].cells.empty());
    }
    (rows[0].matched ? matched : read) += 1;
  }
  EXPECT_GT(matched, 5000);
  EXPECT_GT(read, 3000);
  EXPECT_GT(refused, 1000);
  // An expected text is an array of bare numbers.
  std::vector<JsonNumberRows> bad = answer_rows();
  bad[1].expected = "[[1,2,null]]";
  EXPECT_THROW(JsonDocument::parse("{}", "test", 8, nullptr, bad), std::invalid_argument);
  bad = answer_rows();
  bad[0].expected = "[1,2";
  EXPECT_THROW(JsonDocument::parse("{}", "test", 8, nullptr, bad), std::invalid_argument);
}

TEST(JsonNumberRows, TheDepthLimitHoldsForTheRowsAsForAnyArray) {
  std::vector<JsonNumberRows> rows = answer_rows();
  // The rows' arrays at depths 3 and 4 of a limit of 3: refused as without rows, the path named.
  const std::string deep = R"({"m":{"output_token_logprobs":[[1,2,null]]}})";
  std::string plain, with;
  try {
    JsonDocument::parse(deep, "test", 3);
  } catch (const JsonError& e) {
    plain = e.what();
  }
  try {
    JsonDocument::parse(deep, "test", 3, nullptr, rows);
  } catch (const JsonError& e) {
    with = e.what();
  }
  EXPECT_NE(plain.find("nested deeper than 3"), std::string::npos) << plain;
  EXPECT_EQ(plain, with);
  // At a limit of 4 they fit, and are taken.
  JsonDocument::parse(deep, "test", 4, nullptr, rows);
  EXPECT_EQ(rows[1].rows(), 1u);
}

// ---- Unread arrays: an LLM answer's per-token texts and alternatives checked, not read ----

constexpr std::string_view kUnreadKeys[] = {"tokens", "top_logprobs"};

// A vLLM-shaped answer whose per-token texts and alternatives are often of shapes the quick check gives up
// on (keys with escapes, repeated keys, spelled alike only once decoded, objects of many keys, escaped
// surrogates, numbers past a double, nesting at the depth limit) or that no reader takes (control bytes,
// broken UTF-8, bad escapes), sometimes with the keys elsewhere too.
std::string vllm_logprobs_document(Generator& generator, std::mt19937_64& rng) {
  static const char* kTexts[] = {R"("t")",
                                 R"("\n")",
                                 R"("\u0120x")",
                                 R"("\ud83d\ude00")",
                                 R"("é€")",
                                 R"("\\ \" \/ \b\f\r\t")",
                                 R"("\udc00")",
                                 R"("\ud800x")",
                                 "\"\xC3\"",
                                 "\"a\x01\"",
                                 R"("\x")",
                                 R"("\u12G4")",
                                 R"("")",
                                 "\"\xED\xA0\x80\"",
                                 R"("\uD7FF")",
                                 R"("\uE000")",
                                 "7",
                                 "null"};
  static const char* kValues[] = {
      "-0.10000000149011612", "-1.2e-05", "-9999.0", "0",  "1e400", "-1e-400", "1e299",
      "12345678901234567890", "01",       "-",       "1.", "2E+2"};
  static const char* kSpaces[] = {"", "", "", " ", "\n  "};
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const auto space = [&] { return std::string(kSpaces[pick(std::size(kSpaces))]); };
  const auto text = [&] {
    return std::string(pick(4) == 0 ? kTexts[pick(std::size(kTexts))] : kTexts[pick(6)]);
  };
  const auto logprob = [&] {
    return std::string(pick(5) == 0 ? kValues[pick(std::size(kValues))] : kValues[pick(4)]);
  };
  const size_t n = pick(6);
  std::string tokens = "[" + space(), tops = "[" + space();
  for (size_t i = 0; i < n; ++i) {
    if (i) {
      tokens += space() + "," + space();
      tops += space() + "," + space();
    }
    tokens += pick(20) == 0 ? generator.document() : text();
    std::string top = "{" + space() + text() + space() + ":" + space() + logprob();
    switch (pick(14)) {
      case 0:
        top += "," + text() + ":" + logprob();  // often the same text twice
        break;
      case 1:
        top += R"(,"\u0041":1,"A":2)";  // one key twice, once decoded
        break;
      case 2:
        for (int k = 0; k < 17; ++k) top += ",\"k" + std::to_string(k) + "\":" + logprob();
        break;
      case 3:
        top += ",\"d\":" + generator.document();  // nesting, near the depth limit
        break;
      case 4:
        top = "null";
        break;
      default:
        break;
    }
    tops += top == "null" ? top : top + space() + "}";
  }
  tokens += space() + "]";
  tops += space() + "]";
  std::string decoy;  // the keys with other values
  if (pick(8) == 0) decoy = R"(,"tokens":5)";
  return R"({"choices":[{"logprobs":{"tokens":)" + tokens + R"(,"top_logprobs":)" + tops + R"(},"x":)" +
         generator.document() + R"(}])" + decoy + "}";
}

// The arrays at the keys in a document read plainly.
int keyed_arrays(JsonView v) {
  int count = 0;
  if (v.is_array() || v.is_object()) {
    for (const JsonView e : v) {
      if (v.is_object() && e.is_array() &&
          std::find(std::begin(kUnreadKeys), std::end(kUnreadKeys), e.key()) != std::end(kUnreadKeys))
        ++count;
      count += keyed_arrays(e);
    }
  }
  return count;
}

// Read with the keys asked and without, the documents (often broken) are accepted and refused alike, with
// the same error, and have the same values; most of the keys' arrays are stored unread, and those the quick
// check gives up on are read as usual.
TEST(JsonUnreadArrays, ChangeNothingButWhatIsStored) {
  Generator generator(20261207);
  std::mt19937_64 rng(29);
  int unread = 0, read_as_usual = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = vllm_logprobs_document(generator, rng);
    if (i % 3 == 1) text = mutate(text, rng);
    const testing::RowsReading reading = testing::read_with_and_without_rows(text, {}, 8, kUnreadKeys);
    ASSERT_EQ(reading.difference, "") << text;
    if (!reading.accepted) {
      ++refused;
      continue;
    }
    unread += reading.unread;
    read_as_usual += keyed_arrays(JsonDocument::parse(text, "test", 8).root()) - reading.unread;
  }
  EXPECT_GT(unread, 5000);
  EXPECT_GT(read_as_usual, 1000);
  EXPECT_GT(refused, 5000);
}

TEST(JsonUnreadArrays, AnUnreadArrayIsOneNodeAndWhatTheCheckCannotSayIsReadAsUsual) {
  const std::string text =
      R"({"choices":[{"logprobs":{"tokens":["a","\n","é\u0120"],"token_logprobs":[-0.5],)"
      R"("top_logprobs":[{"a":-0.5,"b":-1.25e-3},{"é":-9999.0}]}}]})";
  const JsonDocument doc = JsonDocument::parse(text, "test", kMaxJsonDepth, nullptr, {}, kUnreadKeys);
  const JsonView logprobs = (*doc.root().find("choices").begin()).find("logprobs");
  EXPECT_EQ(logprobs.find("tokens").raw(), R"(["a","\n","é\u0120"])");
  EXPECT_THROW(logprobs.find("tokens").size(), std::logic_error);
  EXPECT_THROW(logprobs.find("top_logprobs").begin(), std::logic_error);
  EXPECT_EQ(logprobs.find("token_logprobs").size(), 1u);
  // root, choices, choice, logprobs, the two unread arrays, token_logprobs and its number
  EXPECT_EQ(doc.nodes().size(), 8u);
  // What the check leaves to the reader: a key with an escape, an object of 17 keys, an escaped surrogate
  // alone, a number past a double (refused, as without the keys), a string not a key's at the top.
  for (const std::string odd : {R"([{"\u0041":1}])",
                                R"([{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,)"
                                R"("k7":7,"k8":8,"k9":9,"k10":0,"k11":1,"k12":2,"k13":3,)"
                                R"("k14":4,"k15":5,"k16":6}])",
                                R"(["\ud800\udc00"])"}) {
    const std::string document = R"({"tokens":)" + odd + "}";  // (a document views its text)
    const JsonDocument read = JsonDocument::parse(document, "test", 8, nullptr, {}, kUnreadKeys);
    EXPECT_EQ(read.root().find("tokens").size(), 1u) << odd;
  }
  // What no reader takes is refused with the error it has without the keys.
  for (const std::string refused : {R"([1e400])", R"([{"a":1,"a":2}])", R"(["\udc00"])", "[\"\x01\"]"}) {
    const testing::RowsReading reading =
        testing::read_with_and_without_rows(R"({"tokens":)" + refused + "}", {}, 8, kUnreadKeys);
    EXPECT_EQ(reading.difference, "") << refused;
    EXPECT_FALSE(reading.accepted) << refused;
  }
  // The depth limit holds within an unread array as anywhere: at a limit of 3 the inner array of
  // {"m":{"tokens":[[1]]}} is refused with the same error; at 3 levels exactly it is stored unread.
  const testing::RowsReading deep =
      testing::read_with_and_without_rows(R"({"m":{"tokens":[[1]]}})", {}, 3, kUnreadKeys);
  EXPECT_EQ(deep.difference, "");
  EXPECT_FALSE(deep.accepted);
  const JsonDocument fits = JsonDocument::parse(R"({"tokens":[[1]]})", "test", 3, nullptr, {}, kUnreadKeys);
  EXPECT_THROW(fits.root().find("tokens").size(), std::logic_error);
}

}  // namespace
}  // namespace crl
