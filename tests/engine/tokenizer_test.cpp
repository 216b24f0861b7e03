// Unit tests of the tokenizers that need no external reference: Unicode tables, UTF-8 decoding, NFC, the
// split patterns on hand-checked cases, BPE on small hand-made vocabularies (both merge algorithms), the
// loaders' errors, make_tokenizer, chat templates and their use by the text codec.
#include "engine/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/command.h"
#include "engine/bpe_tokenizer.h"
#include "engine/chat_template.h"
#include "engine/error.h"
#include "engine/sha256.h"
#include "engine/unicode_data.h"
#include "envs/codec.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

namespace fs = std::filesystem;

std::string u8(char32_t cp) {
  std::string s;
  unicode::append_utf8(s, cp);
  return s;
}

std::vector<std::string> pieces(SplitPattern pattern, std::string_view text) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t end : pre_tokenize(pattern, text)) {
    out.emplace_back(text.substr(begin, end - begin));
    begin = end;
  }
  return out;
}

using test::TempDir;

std::string base64(std::string_view bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += kAlphabet[(v >> (6 * k)) & 63];
  }
  if (bytes.size() - i == 1) {
    const uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (bytes.size() - i == 2) {
    const uint32_t v =
        (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// A tiktoken file with all 256 bytes (ranks 0-255 in byte order) and the given merges after them.
std::string rank_file(const std::vector<std::string>& merged) {
  std::string text;
  for (int b = 0; b < 256; ++b)
    text += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (size_t k = 0; k < merged.size(); ++k) text += base64(merged[k]) + " " + std::to_string(256 + k) + "\n";
  return text;
}

TEST(Unicode, CategoriesAndWhiteSpace) {
  using namespace unicode;
  EXPECT_EQ(properties('A') & kCategoryMask, kLu);
  EXPECT_EQ(properties('z') & kCategoryMask, kLl);
  EXPECT_EQ(properties(0x01C5) & kCategoryMask, kLt);   // Dž
  EXPECT_EQ(properties(0x02B0) & kCategoryMask, kLm);   // modifier letter small h
  EXPECT_EQ(properties(0x4E2D) & kCategoryMask, kLo);   // 中
  EXPECT_EQ(properties(0x20000) & kCategoryMask, kLo);  // CJK extension B (a range in UnicodeData.txt)
  EXPECT_EQ(properties(0x0301) & kCategoryMask, kMark);
  EXPECT_EQ(properties(0x0903) & kCategoryMask, kMark);  // Devanagari sign visarga (Mc)
  EXPECT_EQ(properties('7') & kCategoryMask, kNumber);
  EXPECT_EQ(properties(0x00BD) & kCategoryMask, kNumber);  // ½ (No)
  EXPECT_EQ(properties(0x216B) & kCategoryMask, kNumber);  // Ⅻ (Nl)
  EXPECT_EQ(properties(0x1F600) & kCategoryMask, kOther);  // 😀 (So)
  EXPECT_EQ(properties('!') & kCategoryMask, kOther);
  for (char32_t c : {U'\t', U'\n', U'\v', U'\f', U'\r', U' ', char32_t{0x85}, char32_t{0xA0},
                     char32_t{0x1680}, char32_t{0x2000}, char32_t{0x200A}, char32_t{0x2028}, char32_t{0x2029},
                     char32_t{0x202F}, char32_t{0x205F}, char32_t{0x3000}}) {
    EXPECT_TRUE(is_space(properties(c))) << std::hex << static_cast<uint32_t>(c);
  }
  EXPECT_FALSE(is_space(properties(0x200B)));  // zero width space is not White_Space
  EXPECT_FALSE(is_space(properties(0x1C)));
  EXPECT_EQ(properties(0x10FFFF), 0);
  EXPECT_EQ(properties(0x110000), 0);
}

TEST(Unicode, DecodeUtf8FollowsTheWhatwgDecoder) {
  const auto units = [](std::string_view text) {
    std::vector<std::pair<size_t, char32_t>> out;
    for (size_t i = 0; i < text.size();) {
      char32_t cp;
      const size_t n = unicode::decode_utf8(text, i, &cp);
      out.emplace_back(n, cp);
      i += n;
    }
    return out;
  };
  using V = std::vector<std::pair<size_t, char32_t>>;
  EXPECT_EQ(units("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"),
            (V{{1, 'a'}, {2, 0xE9}, {3, 0x4E2D}, {4, 0x1F600}}));
  EXPECT_EQ(units("\xE2\x82"), (V{{2, unicode::kInvalid}}));  // a truncated sequence is one unit
  EXPECT_EQ(units("\xE2\x82x"), (V{{2, unicode::kInvalid}, {1, 'x'}}));
  EXPECT_EQ(units("\xC0\xAF"), (V{{1, unicode::kInvalid}, {1, unicode::kInvalid}}));  // overlong lead
  // A surrogate (ED A0 80): ED allows only 80-9F next, so each byte is its own unit.
  EXPECT_EQ(units("\xED\xA0\x80"),
            (V{{1, unicode::kInvalid}, {1, unicode::kInvalid}, {1, unicode::kInvalid}}));
  EXPECT_EQ(units("\xF4\x90\x80\x80"), (V{{1, unicode::kInvalid},
                                          {1, unicode::kInvalid},
                                          {1, unicode::kInvalid},
                                          {1, unicode::kInvalid}}));  // above U+10FFFF
  EXPECT_EQ(units("\xF0\x9F\x98"), (V{{3, unicode::kInvalid}}));
}

TEST(Unicode, NfcHandCases) {
  EXPECT_EQ(unicode::nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(unicode::nfc("e" + u8(0x301)), u8(0xE9));
  EXPECT_EQ(unicode::nfc(u8(0x212B)), u8(0xC5));                              // ANGSTROM SIGN -> Å
  EXPECT_EQ(unicode::nfc(u8(0x1100) + u8(0x1161) + u8(0x11A8)), u8(0xAC01));  // Hangul L V T -> 각
  // Canonical reordering: dot below (ccc 220) goes before dot above (230), then both compose.
  EXPECT_EQ(unicode::nfc("d" + u8(0x307) + u8(0x323)), u8(0x1E0D) + u8(0x307));
  EXPECT_EQ(unicode::nfc(u8(0x0958)), u8(0x0915) + u8(0x093C));  // a composition exclusion stays decomposed
  EXPECT_EQ(unicode::nfc("\xFF"
                         "e" +
                         u8(0x301) + "\xE2\x82"),
            "\xFF" + u8(0xE9) + "\xE2\x82");
}

// The Unicode Consortium's conformance file (Debian package unicode-data): c2 == NFC(c1) == NFC(c2) ==
// NFC(c3) and c4 == NFC(c4) == NFC(c5) for every line.
TEST(Unicode, NfcConformsToNormalizationTest) {
  const std::string file = "/usr/share/unicode/NormalizationTest.txt.bz2";
  if (!fs::exists(file) || std::system("command -v bzcat >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << file << " or bzcat missing: apt-get install unicode-data bzip2";
  }
  FILE* pipe = ::popen(("bzcat " + file).c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string data;
  char buffer[65536];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) data.append(buffer, n);
  ::pclose(pipe);
  size_t lines = 0, failures = 0;
  std::istringstream in(data);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line[0] == '@') continue;
    std::vector<std::string> columns;
    std::istringstream fields(line);
    for (std::string field; columns.size() < 5 && std::getline(fields, field, ';');) {
      std::string text;
      std::istringstream cps(field);
      for (std::string hex; cps >> hex;)
        unicode::append_utf8(text, static_cast<char32_t>(std::stoul(hex, nullptr, 16)));
      columns.push_back(text);
    }
    ASSERT_EQ(columns.size(), 5u) << line;
    ++lines;
    const bool ok = unicode::nfc(columns[0]) == columns[1] && unicode::nfc(columns[1]) == columns[1] &&
                    unicode::nfc(columns[2]) == columns[1] && unicode::nfc(columns[3]) == columns[3] &&
                    unicode::nfc(columns[4]) == columns[3];
    if (!ok && ++failures <= 5) ADD_FAILURE() << "NFC differs on: " << line;
  }
  EXPECT_GT(lines, 15000u);
  EXPECT_EQ(failures, 0u);
}

TEST(SplitPattern, HandCheckedCases) {
  using P = std::vector<std::string>;
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "Hello world's"), (P{"Hello", " world", "'s"}));
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "I'M 12345 (ok)"),
            (P{"I", "'M", " ", "123", "45", " (", "ok", ")"}));
  // \s*[\r\n]+ takes spaces up to the last line break; \s+(?!\S) leaves one space for the next word.
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "a  \n\n  b   "), (P{"a", "  \n\n", " ", " b", "   "}));
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "x!!\n\ny"), (P{"x", "!!\n\n", "y"}));
  EXPECT_EQ(pieces(SplitPattern::kQwen2, "abc 12345"), (P{"abc", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(pieces(SplitPattern::kGpt2, "Hello world's 123  x"),
            (P{"Hello", " world", "'s", " 123", " ", " x"}));
  EXPECT_EQ(pieces(SplitPattern::kGpt2, "I'M"),
            (P{"I", "'", "M"}));  // GPT-2's contractions are case-sensitive
  // o200k: a word is an upper run followed by a lower run; CamelCase splits; contractions stay attached.
  EXPECT_EQ(pieces(SplitPattern::kO200k, "HelloWorld don't HTTPServer"),
            (P{"Hello", "World", " don't", " HTTPServer"}));
  EXPECT_EQ(pieces(SplitPattern::kO200k, "a/b//\n"), (P{"a", "/b", "//\n"}));
  EXPECT_EQ(pieces(SplitPattern::kO200k, "ABC"), (P{"ABC"}));
  // A combining mark can start a word (it is in both [^\r\n\p{L}\p{N}] and [\p{M}]).
  EXPECT_EQ(pieces(SplitPattern::kO200k, u8(0x301) + "ab"), (P{u8(0x301) + "ab"}));
  // Invalid bytes are "other" characters, one per maximal invalid subsequence.
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "\xE2\x82word \xFF\xFE!"), (P{"\xE2\x82word", " \xFF\xFE!"}));
  EXPECT_TRUE(pre_tokenize(SplitPattern::kCl100k, "").empty());
  // DeepSeek-V3: digit groups of three and CJK runs first; then punctuation glued to the ASCII letters after
  // it, a space before a symbol run, line breaks after it; a space at a piece's end stays alone; what the
  // regex does not match (the digits) is a piece of its own.
  EXPECT_EQ(pieces(SplitPattern::kDeepSeekV3, "Hi 12345" + u8(0x4F60) + u8(0x597D) + " $x!\n\n.py"),
            (P{"Hi", " ", "123", "45", u8(0x4F60) + u8(0x597D), " $", "x", "!\n\n", ".py"}));
  EXPECT_EQ(pieces(SplitPattern::kDeepSeekV3, "a  \n\n  b   "), (P{"a", "  \n\n", " ", " b", "   "}));
  EXPECT_EQ(pieces(SplitPattern::kDeepSeekV3, u8(0x20AC) + "5 (ok)"), (P{u8(0x20AC), "5", " (", "ok", ")"}));
}

TEST(SplitPattern, RegexSourcesAndNames) {
  for (SplitPattern p :
       {SplitPattern::kGpt2, SplitPattern::kCl100k, SplitPattern::kO200k, SplitPattern::kQwen2}) {
    EXPECT_EQ(split_pattern_from_regex(split_pattern_regex(p)), p);
    EXPECT_EQ(split_pattern_from_name(split_pattern_name(p)), p);
  }
  EXPECT_FALSE(split_pattern_from_regex("\\w+"));
  EXPECT_EQ(split_pattern_from_name("deepseek_v3"), SplitPattern::kDeepSeekV3);
  // Its last regex alone is not the sequence.
  EXPECT_FALSE(split_pattern_from_regex(deepseek_split_regexes()[2]));
  EXPECT_FALSE(split_pattern_from_name("llama"));
}

TEST(BpeTokenizer, MergesLowestRankFirstWithBothAlgorithms) {
  TempDir dir;
  // Merges: "ab" (256), "bc" (257), "abc" (258), "aa" (259), "aaaa" (260).
  const std::string path = dir.write("toy.tiktoken", rank_file({"ab", "bc", "abc", "aa", "aaaa"}));
  const auto t = BpeTokenizer::load_tiktoken(path, SplitPattern::kCl100k, {{"<|end|>", 300}});
  EXPECT_EQ(t->encode("abc"), (std::vector<TokenId>{258}));        // whole piece in the vocabulary
  EXPECT_EQ(t->encode("abcb"), (std::vector<TokenId>{258, 'b'}));  // ab first (rank 256), then ab+c
  EXPECT_EQ(t->encode("aaaaa"), (std::vector<TokenId>{260, 'a'}));
  // Long pieces go through the heap; short ones through the linear scan: the same rule either way.
  for (size_t n : {5, 47, 48, 49, 50, 101, 1000, 4097}) {
    const auto ids = t->encode(std::string(n, 'a'));
    std::vector<TokenId> expected(n / 4, 260);
    if (n % 4 >= 2) expected.push_back(259);
    if (n % 2 == 1) expected.push_back('a');
    EXPECT_EQ(ids, expected) << n;
  }
  std::string long_word;
  for (int k = 0; k < 40; ++k) long_word += "abcb";
  std::vector<TokenId> expected;
  for (int k = 0; k < 40; ++k) expected.insert(expected.end(), {258, 'b'});
  EXPECT_EQ(t->encode(long_word), expected);
  EXPECT_EQ(t->encode("ab<|end|>ab"), (std::vector<TokenId>{256, 300, 256}));
  EXPECT_EQ(t->encode_ordinary("<|end|>").size(), 7u);  // pieces "<|", "end", "|>": single bytes here
  EXPECT_EQ(t->special_token("<|end|>"), 300);
  EXPECT_EQ(t->vocab_size(), 301);
  EXPECT_EQ(t->decode(std::vector<TokenId>{258, 300, 'x', 299}), "abc<|end|>x<|unk:299|>");
}

TEST(BpeTokenizer, RoundTripsArbitraryBytes) {
  TempDir dir;
  const auto t = BpeTokenizer::load_tiktoken(dir.write("toy.tiktoken", rank_file({"ab", "  "})),
                                             SplitPattern::kO200k, {});
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (const std::string& s : {all, std::string("\xE2\x82 ab\xFF\n\n  \xF0\x9F"), std::string()}) {
    EXPECT_EQ(t->decode(t->encode(s)), s);
  }
}

TEST(BpeTokenizer, FingerprintFollowsTheDefinition) {
  TempDir dir;
  const auto a =
      BpeTokenizer::load_tiktoken(dir.write("a.tiktoken", rank_file({"ab"})), SplitPattern::kCl100k, {});
  const auto same =
      BpeTokenizer::load_tiktoken(dir.write("b.tiktoken", rank_file({"ab"})), SplitPattern::kCl100k, {});
  const auto other_rank =
      BpeTokenizer::load_tiktoken(dir.write("c.tiktoken", rank_file({"ba"})), SplitPattern::kCl100k, {});
  const auto other_pattern =
      BpeTokenizer::load_tiktoken(dir.write("d.tiktoken", rank_file({"ab"})), SplitPattern::kO200k, {});
  const auto other_special = BpeTokenizer::load_tiktoken(dir.write("e.tiktoken", rank_file({"ab"})),
                                                         SplitPattern::kCl100k, {{"<s>", 257}});
  EXPECT_EQ(a->fingerprint(), same->fingerprint());
  EXPECT_EQ(a->fingerprint().size(), 16u);
  EXPECT_NE(a->fingerprint(), other_rank->fingerprint());
  EXPECT_NE(a->fingerprint(), other_pattern->fingerprint());
  EXPECT_NE(a->fingerprint(), other_special->fingerprint());
  EXPECT_NE(a->fingerprint(), ByteTokenizer().fingerprint());
}

void expect_error(const std::function<void()>& body, const std::string& where_part,
                  const std::string& field_part) {
  try {
    body();
    ADD_FAILURE() << "no crl::Error thrown";
  } catch (const Error& e) {
    EXPECT_NE(e.where().find(where_part), std::string::npos) << e.what();
    EXPECT_NE(e.field().find(field_part), std::string::npos) << e.what();
  }
}

TEST(BpeTokenizer, TiktokenFileErrorsNameFileLineAndField) {
  TempDir dir;
  expect_error([&] { make_tokenizer(dir.write("x", "") + "_missing.tiktoken"); }, "_missing.tiktoken", "");
  const std::string bad_base64 = dir.write("cl100k_base.tiktoken", "YQ== 0\n!!! 1\n");
  expect_error([&] { make_tokenizer(bad_base64); }, "cl100k_base.tiktoken:2", "token");
  const std::string bad_rank = dir.write("r50k_base.tiktoken", "YQ== 0\nYg== x1\n");
  expect_error([&] { make_tokenizer(bad_rank); }, "r50k_base.tiktoken:2", "rank");
  const std::string gap = dir.write("o200k_base.tiktoken", "YQ== 0\nYg== 2\n");
  expect_error([&] { make_tokenizer(gap); }, "o200k_base.tiktoken", "rank");
  const std::string no_space = dir.write("p50k_base.tiktoken", "YQ==\n");
  expect_error([&] { make_tokenizer(no_space); }, "p50k_base.tiktoken:1", "line");
  const std::string unknown = dir.write("mine.tiktoken", rank_file({}));
  expect_error([&] { make_tokenizer(unknown); }, "mine.tiktoken", "pattern");
  expect_error([&] { make_tokenizer(unknown + "#nope"); }, "mine.tiktoken", "pattern");
  const auto t = make_tokenizer(unknown + "#qwen2");
  EXPECT_EQ(t->encode("12"), (std::vector<TokenId>{'1', '2'}));
  expect_error([&] { make_tokenizer("vocab.txt"); }, "vocab.txt", "--tokenizer");
  expect_error([&] { make_tokenizer(""); }, "--tokenizer", "spec");
  EXPECT_EQ(make_tokenizer("byte")->name(), "byte");
}

// A byte-level tokenizer.json in the GPT-2 spelling: bytes as printable characters (space is "Ġ").
std::string toy_hf_json(const std::string& pre_tokenizer, const std::string& normalizer = "null",
                        const std::string& merges = R"(["h e", "he l", "Ġ w"])") {
  nlohmann::json vocab = nlohmann::json::object();
  int next = 0, shifted = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    vocab[u8(printable ? static_cast<char32_t>(b) : static_cast<char32_t>(shifted++))] = next++;
  }
  vocab["he"] = next++;
  vocab["hel"] = next++;
  vocab["Ġw"] = next++;
  return R"({"version": "1.0", "added_tokens": [{"id": 300, "content": "<|im_start|>", "special": true},
            {"id": 301, "content": "<|im_end|>", "special": true}],
            "normalizer": )" +
         normalizer + R"(, "pre_tokenizer": )" + pre_tokenizer +
         R"(, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": )" + vocab.dump() +
         R"(, "merges": )" + merges + "}}";
}

TEST(BpeTokenizer, LoadsAByteLevelTokenizerJson) {
  TempDir dir;
  const std::string gpt2 = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  const auto t = make_tokenizer(dir.write("tokenizer.json", toy_hf_json(gpt2)));
  EXPECT_EQ(t->encode("hel w<|im_end|>"), (std::vector<TokenId>{257, 258, 301}));
  EXPECT_EQ(t->decode(t->encode("hel w<|im_end|>")), "hel w<|im_end|>");
  // Merges are pair-specific: "hel" + "l" has no merge even though "he" + "l" does.
  EXPECT_EQ(t->encode("hell"), (std::vector<TokenId>{257, 'l'}));  // byte ids are the byte values here
  const std::string qwen =
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": )" +
      nlohmann::json(std::string(split_pattern_regex(SplitPattern::kQwen2))).dump() +
      R"(}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "use_regex": false}]})";
  const auto q = std::dynamic_pointer_cast<const BpeTokenizer>(
      make_tokenizer(dir.write("q.json", toy_hf_json(qwen, R"({"type": "NFC"})"))));
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->pattern(), SplitPattern::kQwen2);
  EXPECT_TRUE(q->nfc());
  EXPECT_EQ(q->encode("e" + u8(0x301)), q->encode(u8(0xE9)));  // normalized first
  EXPECT_NE(q->fingerprint(), t->fingerprint());
}

TEST(BpeTokenizer, TokenizerJsonErrorsNameFileAndField) {
  TempDir dir;
  const std::string gpt2 = R"({"type": "ByteLevel", "use_regex": true})";
  expect_error([&] { make_tokenizer(dir.write("broken.json", "{\"model\": ")); }, "broken.json", "");
  expect_error([&] { make_tokenizer(dir.write("a.json", R"({"pre_tokenizer": )" + gpt2 + "}")); }, "a.json",
               "model");
  const std::string split =
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\w+"},
      "behavior": "Isolated"}, {"type": "ByteLevel", "use_regex": false}]})";
  expect_error([&] { make_tokenizer(dir.write("b.json", toy_hf_json(split))); }, "b.json",
               "pre_tokenizer.pretokenizers[0].pattern.Regex");
  expect_error([&] { make_tokenizer(dir.write("c.json", toy_hf_json(gpt2, R"({"type": "NFKC"})"))); },
               "c.json", "normalizer.type");
  expect_error([&] { make_tokenizer(dir.write("d.json", toy_hf_json(gpt2, "null", R"(["h zz"])"))); },
               "d.json", "model.merges[0]");
  expect_error([&] { make_tokenizer(dir.write("e.json", toy_hf_json(R"({"type": "Whitespace"})"))); },
               "e.json", "pre_tokenizer.type");
  // DeepSeek-V3's sequence with one regex changed is not DeepSeek-V3's.
  nlohmann::json sequence = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array()}};
  for (std::string_view regex : deepseek_split_regexes()) {
    sequence["pretokenizers"].push_back(
        {{"type", "Split"},
         {"pattern", {{"Regex", regex == "\\p{N}{1,3}" ? "\\p{N}{1,4}" : regex}}},
         {"behavior", "Isolated"},
         {"invert", false}});
  }
  sequence["pretokenizers"].push_back({{"type", "ByteLevel"}, {"use_regex", false}});
  expect_error([&] { make_tokenizer(dir.write("f.json", toy_hf_json(sequence.dump()))); }, "f.json",
               "pre_tokenizer.pretokenizers");
}

// A SentencePiece-style tokenizer.json in Gemma's form: spaces as "\u2581", byte fallback, added tokens that
// are not special ("\n\n"). `edit` changes the JSON before it is written (the bad-input cases).
std::string toy_metaspace_json(const std::function<void(nlohmann::json&)>& edit = {}) {
  const std::string space = u8(0x2581);
  nlohmann::json vocab = nlohmann::json::object();
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) vocab[std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">"] = b;
  int next = 256;
  for (const std::string& t :
       {space, std::string("a"), std::string("b"), space + "a", std::string("ab"), space + "ab",
        std::string("\n\n"), u8(0xE9), std::string("x"), "x" + space, "x" + space + "b"})
    vocab[t] = next++;
  nlohmann::json root = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 300}, {"content", "<start_of_turn>"}, {"special", true}},
        {{"id", vocab["\n\n"]}, {"content", "\n\n"}, {"special", false}}}},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}}}}}},
      {"model",
       {{"type", "BPE"},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", nlohmann::json::array(
                       {nlohmann::json::array({space, "a"}), nlohmann::json::array({"a", "b"}),
                        nlohmann::json::array({space + "a", "b"}), nlohmann::json::array({"x", space}),
                        nlohmann::json::array({"x" + space, "b"})})}}}};
  if (edit) edit(root);
  return root.dump();
}

TEST(BpeTokenizer, LoadsASentencePieceStyleTokenizerJson) {
  TempDir dir;
  const auto t = std::dynamic_pointer_cast<const BpeTokenizer>(
      make_tokenizer(dir.write("gemma.json", toy_metaspace_json())));
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->metaspace());
  // " ab": "\u2581" + "a" merges first (rank 0), then "\u2581a" + "b" (rank 2); "ab" (rank 1) never forms.
  EXPECT_EQ(t->encode(" ab"), (std::vector<TokenId>{261}));
  EXPECT_EQ(t->encode("ab ab"), (std::vector<TokenId>{260, 261}));
  // Words are merged alone, but not across a space that follows a character some token holds before "\u2581"
  // ("x\u2581b" here, Gemma's ">\u2581</"): the ids are those of merging the whole text.
  EXPECT_EQ(t->encode("x b"), (std::vector<TokenId>{266}));
  EXPECT_EQ(t->encode("a b x b"), (std::vector<TokenId>{257, 256, 258, 256, 266}));
  // A character outside the vocabulary is its UTF-8 bytes' tokens; one inside is its own token.
  EXPECT_EQ(t->encode("\xC3\xA0"), (std::vector<TokenId>{0xC3, 0xA0}));
  EXPECT_EQ(t->encode("\xC3\xA9"), (std::vector<TokenId>{263}));
  // "\n\n" (not special) is split out of content too; "<start_of_turn>" (special) only from template text.
  EXPECT_EQ(t->encode_ordinary("a\n\nb"), (std::vector<TokenId>{257, 262, 258}));
  EXPECT_EQ(t->encode("<start_of_turn>a"), (std::vector<TokenId>{300, 257}));
  EXPECT_NE(t->encode_ordinary("<start_of_turn>a").front(), 300);
  // Decoding: "\u2581" is a space, byte tokens are their bytes (exactly, invalid UTF-8 included).
  for (const std::string& text :
       {std::string(" ab ab\n\n"), std::string("x\xFF\xC3 \xE2\x82"), std::string("<start_of_turn> a")})
    EXPECT_EQ(t->decode(t->encode(text)), text) << text;
  EXPECT_NE(t->fingerprint(), make_tokenizer(dir.write("g2.json", toy_metaspace_json([](nlohmann::json& j) {
                                                         j["added_tokens"][1]["special"] = true;
                                                       })))
                                  ->fingerprint())
      << "whether an added token is special changes the mapping of content";
}

TEST(BpeTokenizer, SentencePieceStyleErrorsNameFileAndField) {
  TempDir dir;
  const auto bad = [&](const char* name, const std::function<void(nlohmann::json&)>& edit,
                       const char* field) {
    expect_error([&] { make_tokenizer(dir.write(name, toy_metaspace_json(edit))); }, name, field);
  };
  bad(
      "no_fallback.json", [](nlohmann::json& j) { j["model"]["byte_fallback"] = false; },
      "model.byte_fallback");
  bad(
      "missing_byte.json", [](nlohmann::json& j) { j["model"]["vocab"].erase("<0x41>"); }, "model.vocab");
  bad(
      "decoder.json",
      [](nlohmann::json& j) {
        j["decoder"] = {{"type", "ByteLevel"}};
      },
      "decoder");
  bad(
      "metaspace_pre.json",
      [](nlohmann::json& j) {
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", u8(0x2581)}};
      },
      "pre_tokenizer");
  bad(
      "llama2.json",
      [](nlohmann::json& j) {
        j["normalizer"] = {
            {"type", "Sequence"},
            {"normalizers", {{{"type", "Prepend"}, {"prepend", u8(0x2581)}}, j["normalizer"]}}};
      },
      "normalizer.type");
  bad(
      "ignore_merges.json", [](nlohmann::json& j) { j["model"]["ignore_merges"] = true; },
      "model.ignore_merges");
  // byte_fallback without the metaspace normalizer (a byte-level file that sets it) is refused too.
  bad(
      "byte_level_fallback.json",
      [](nlohmann::json& j) {
        j["normalizer"] = nullptr;
        j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"use_regex", true}};
        j["decoder"] = {{"type", "ByteLevel"}};
      },
      "model.byte_fallback");
}

// A model repository's tokenizer.json is untrusted: members of the wrong type, and ids that would size the
// tables for billions of tokens (std::bad_alloc, or an id wrapped into int32), are refused naming the field;
// before, each ended the process (nlohmann's type_error or bad_alloc escaped the loader).
TEST(BpeTokenizer, HostileTokenizerJsonIsRefusedNamingTheField) {
  TempDir dir;
  const auto bad = [&](const char* name, const std::function<void(nlohmann::json&)>& edit,
                       const char* field) {
    nlohmann::json j = nlohmann::json::parse(toy_metaspace_json());
    edit(j);
    expect_error([&] { make_tokenizer(dir.write(name, j.dump())); }, name, field);
  };
  bad(
      "big_added_id.json", [](nlohmann::json& j) { j["added_tokens"][0]["id"] = 2147483000; },
      "added_tokens[0].id");
  bad(
      "wrapping_added_id.json", [](nlohmann::json& j) { j["added_tokens"][0]["id"] = 9999999999; },
      "added_tokens[0].id");
  bad(
      "unsigned_added_id.json", [](nlohmann::json& j) { j["added_tokens"][0]["id"] = 18446744073709551615u; },
      "added_tokens[0].id");
  bad(
      "big_vocab_id.json", [](nlohmann::json& j) { j["model"]["vocab"]["ab"] = 1000000000; },
      "model.vocab[\"ab\"]");
  bad(
      "negative_vocab_id.json", [](nlohmann::json& j) { j["model"]["vocab"]["ab"] = -1; },
      "model.vocab[\"ab\"]");
  bad(
      "text_vocab_id.json", [](nlohmann::json& j) { j["model"]["vocab"]["ab"] = "5"; },
      "model.vocab[\"ab\"]");
  bad(
      "fraction_vocab_id.json", [](nlohmann::json& j) { j["model"]["vocab"]["ab"] = 5.5; },
      "model.vocab[\"ab\"]");
  bad(
      "array_vocab.json", [](nlohmann::json& j) { j["model"]["vocab"] = nlohmann::json::array(); },
      "model.vocab");
  bad(
      "no_vocab.json", [](nlohmann::json& j) { j["model"].erase("vocab"); }, "model.vocab");
  bad(
      "array_model.json", [](nlohmann::json& j) { j["model"] = nlohmann::json::array({1}); }, "model.");
  bad(
      "no_merges.json", [](nlohmann::json& j) { j["model"].erase("merges"); }, "model.merges");
  bad(
      "object_merges.json", [](nlohmann::json& j) { j["model"]["merges"] = nlohmann::json::object(); },
      "model.merges");
  bad(
      "number_merge.json", [](nlohmann::json& j) { j["model"]["merges"][0] = 7; }, "model.merges[0]");
  bad(
      "three_part_merge.json",
      [](nlohmann::json& j) {
        j["model"]["merges"][0] = nlohmann::json::array({"a", "b", "c"});
      },
      "model.merges[0]");
  bad(
      "unknown_merge_part.json",
      [](nlohmann::json& j) {
        j["model"]["merges"][0] = nlohmann::json::array({"a", "zz"});
      },
      "model.merges[0]");
  // The messages say what was found.
  try {
    nlohmann::json j = nlohmann::json::parse(toy_metaspace_json());
    j["model"]["vocab"]["ab"] = "5";
    make_tokenizer(dir.write("text_vocab_id_message.json", j.dump()));
    ADD_FAILURE() << "no crl::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "expected an integer id, found a string") << e.what();
  }
  try {
    nlohmann::json j = nlohmann::json::parse(toy_metaspace_json());
    j["model"]["vocab"]["ab"] = 1000000000;
    make_tokenizer(dir.write("big_vocab_id_message.json", j.dump()));
    ADD_FAILURE() << "no crl::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.message().rfind("id 1000000000 is outside [0, ", 0), 0u) << e.what();
  }
  bad(
      "text_flag.json", [](nlohmann::json& j) { j["model"]["ignore_merges"] = "no"; }, "model.ignore_merges");
  bad(
      "text_dropout.json", [](nlohmann::json& j) { j["model"]["dropout"] = "0"; }, "model.dropout");
  // An added token on a vocabulary entry's id with another text (ids that would decode to what they do not
  // encode; a fuzzer's find); the same text is fine (Gemma's "\n\n").
  bad(
      "conflicting_added_id.json",
      [](nlohmann::json& j) { j["added_tokens"][0]["id"] = j["model"]["vocab"]["ab"]; },
      "added_tokens[0].id");
  bad(
      "same_id_twice.json",
      [](nlohmann::json& j) { j["added_tokens"][1]["id"] = j["added_tokens"][0]["id"]; },
      "added_tokens[1].id");
  bad(
      "same_text_twice.json",
      [](nlohmann::json& j) { j["added_tokens"][1]["content"] = j["added_tokens"][0]["content"]; },
      "added_tokens[1].content");
  bad(
      "number_strip.json", [](nlohmann::json& j) { j["added_tokens"][0]["lstrip"] = 0; },
      "added_tokens[0].lstrip");
  // The same in the byte-level layout: a pre-tokenizer flag that is not a boolean, a Split's behavior that
  // is not a string (that one matches no supported layout).
  const std::string gpt2 = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": 1})";
  expect_error([&] { make_tokenizer(dir.write("use_regex.json", toy_hf_json(gpt2))); }, "use_regex.json",
               "pre_tokenizer.use_regex");
  const std::string split =
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\w+"},
          "behavior": 7}, {"type": "ByteLevel", "use_regex": false}]})";
  expect_error([&] { make_tokenizer(dir.write("behavior.json", toy_hf_json(split))); }, "behavior.json",
               "pre_tokenizer.pretokenizers[0]");
  nlohmann::json same = nlohmann::json::parse(toy_metaspace_json());
  same["added_tokens"][0]["content"] = "ab";
  same["added_tokens"][0]["id"] = same["model"]["vocab"]["ab"];
  EXPECT_EQ(make_tokenizer(dir.write("same.json", same.dump()))->encode("ab"),
            (std::vector<TokenId>{same["model"]["vocab"]["ab"].get<TokenId>()}));
  // Ids may leave up to 2^20 unused: the largest id below the file's entries plus 2^20 loads, the next is
  // refused.
  nlohmann::json sparse = nlohmann::json::parse(toy_metaspace_json());
  const int entries = static_cast<int>(sparse["model"]["vocab"].size() + sparse["added_tokens"].size());
  sparse["added_tokens"][0]["id"] = entries + (1 << 20) - 1;
  EXPECT_EQ(make_tokenizer(dir.write("sparse.json", sparse.dump()))->vocab_size(), entries + (1 << 20));
  sparse["added_tokens"][0]["id"] = entries + (1 << 20);
  expect_error([&] { make_tokenizer(dir.write("sparser.json", sparse.dump())); }, "sparser.json",
               "added_tokens[0].id");
}

TEST(BpeTokenizer, EncodesConcurrently) {
  TempDir dir;
  const auto t = BpeTokenizer::load_tiktoken(
      dir.write("toy.tiktoken", rank_file({"ab", "bc", "abc", "aa", "aaaa"})), SplitPattern::kO200k, {});
  std::vector<std::string> texts;
  for (int k = 0; k < 64; ++k) texts.push_back(std::string(k * 7, 'a') + " abcb " + std::to_string(k));
  std::vector<std::vector<TokenId>> serial;
  for (const auto& s : texts) serial.push_back(t->encode(s));
  std::vector<std::vector<std::vector<TokenId>>> results(4, std::vector<std::vector<TokenId>>(texts.size()));
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t k = 0; k < texts.size(); ++k) results[w][k] = t->encode(texts[k]);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(results[w], serial);
}

TEST(ChatTemplate, RendersAllRoles) {
  const std::vector<ChatMessage> chat = {
      {ChatRole::kSystem, "S"}, {ChatRole::kUser, "U"}, {ChatRole::kAssistant, "A"}, {ChatRole::kTool, "T"}};
  EXPECT_EQ(
      render_chat(chatml_template(), chat, true),
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nT\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(plain_template(), chat, false),
            "S\n\nUser: U\n\nAssistant: A<|endoftext|>\n\nTool: T\n\n");
  EXPECT_EQ(chat_template_by_name("plain"), plain_template());
  EXPECT_NE(chatml_template().definition(), plain_template().definition());
  expect_error([] { chat_template_by_name("llama"); }, "--chat-template", "name");
}

TEST(ChatTemplate, TextCodecUsesTheConfiguredTemplate) {
  const auto tokenizer = std::make_shared<ByteTokenizer>();
  const TextPrompts prompts{"Sum.", "Resume:", "[cut]", {}};
  const auto chatml = make_text_codec(tokenizer, prompts);
  // The default keeps the fingerprint it had before templates were configurable.
  EXPECT_EQ(chatml->fingerprint(),
            sha256_hex("chatml|" + tokenizer->fingerprint() + "|Sum.|Resume:|[cut]").substr(0, 16));
  EXPECT_EQ(tokenizer->decode(chatml->encode_user(Observation{"hi", {}})),
            "<|im_start|>user\nhi<|im_end|>\n");
  const auto plain = make_text_codec(tokenizer, prompts, plain_template());
  EXPECT_NE(plain->fingerprint(), chatml->fingerprint());
  EXPECT_EQ(tokenizer->decode(plain->encode_system(Observation{"rules", {}})), "rules\n\n");
  EXPECT_EQ(tokenizer->decode(plain->encode_action("ls")), "ls<|endoftext|>");
  const auto action = plain->encode_action("ls");
  EXPECT_EQ(tokenizer->decode(plain->encode_observation(Observation{"out", {}}, action)),
            "\n\nUser: out\n\n");
  EXPECT_EQ(tokenizer->decode(plain->encode_observation(Observation{"out", {}}, tokenizer->encode("ls"))),
            "<|endoftext|>\n\nUser: out\n\n");
  EXPECT_EQ(plain->decode_action(action).text, "ls");
  const ContextTemplate t = plain->context_template();
  EXPECT_EQ(tokenizer->decode(t.turn_header), "Assistant: ");
  EXPECT_EQ(tokenizer->decode(t.summary_instruction), "User: Sum.\n\nAssistant: ");
  EXPECT_EQ(tokenizer->decode(t.resume_prefix), "User: Resume:");
  EXPECT_EQ(tokenizer->decode(t.resume_suffix), "\n\n");
}

TEST(ChatTemplate, TextCodecRefusesATokenizerWithoutTheTemplateTokens) {
  TempDir dir;
  const auto no_chatml = make_tokenizer(dir.write("o200k_base.tiktoken", rank_file({})));
  expect_error([&] { make_text_codec(no_chatml); }, "o200k_base", "chat template");
  const auto plain = make_text_codec(no_chatml, {}, plain_template());  // <|endoftext|> ends the turn
  EXPECT_EQ(plain->encode_action("").back(), no_chatml->special_token("<|endoftext|>"));
  const auto no_end = make_tokenizer(dir.write("mine.tiktoken", rank_file({})) + "#gpt2");
  expect_error([&] { make_text_codec(no_end, {}, plain_template()); }, "mine", "chat template");
}

TEST(TokenizeCommand, EncodesATurnAndDecodesIds) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(
      cli::run_cli({"tokenize", "--tokenizer", "byte", "--chat-template", "plain", "--role", "user", "hi"}),
      0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("tokens: 10\n"), std::string::npos) << out;  // "User: hi\n\n"
  EXPECT_NE(out.find("ids: 85 115 101 114 58 32 104 105 10 10\n"), std::string::npos) << out;
  testing::internal::CaptureStdout();
  EXPECT_EQ(cli::run_cli({"tokenize", "--decode", "257", "104", "258"}), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("text: \"<|im_start|>h<|im_end|>\""),
            std::string::npos);
  testing::internal::CaptureStderr();
  EXPECT_EQ(cli::run_cli({"tokenize", "--tokenizer", "/nonexistent/tokenizer.json", "x"}), 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("/nonexistent/tokenizer.json"), std::string::npos);
  testing::internal::CaptureStderr();
  EXPECT_EQ(cli::run_cli({"tokenize", "--decode", "x1"}), 1);
  testing::internal::GetCapturedStderr();
}

// --default-chat-template-kwargs renders a --messages conversation (and a turn) with the variables; without
// a model's template it is refused, naming the option.
TEST(TokenizeCommand, TemplateVariablesRenderTheConversation) {
  const TempDir dir;
  const std::string jinja = dir.write(
      "mode.jinja",
      "{%- for message in messages %}{{- message.role + ': ' + message.content + '<|im_end|>' }}{%- endfor %}"
      "{%- if add_generation_prompt %}{{- 'assistant:' + (' ' + mode if mode is defined else '') }}{%- endif "
      "%}");
  const std::string messages = dir.write("m.json", R"([{"role": "user", "content": "hi"}])");
  testing::internal::CaptureStdout();
  EXPECT_EQ(cli::run_cli({"tokenize", "--chat-template", jinja, "--default-chat-template-kwargs",
                          R"({"mode": "brief"})", "--messages", messages}),
            0);
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find(R"(text: "user: hi<|im_end|>assistant: brief")"), std::string::npos) << out;
  testing::internal::CaptureStdout();
  EXPECT_EQ(cli::run_cli({"tokenize", "--chat-template", jinja, "--messages", messages}), 0);
  out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find(R"(text: "user: hi<|im_end|>assistant:")"), std::string::npos) << out;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"tokenize", "--default-chat-template-kwargs", "{}", "hi"},
        {"tokenize", "--chat-template", "chatml", "--default-chat-template-kwargs", "{}", "hi"},
        {"tokenize", "--chat-template", jinja, "--default-chat-template-kwargs", "3", "--messages",
         messages}}) {
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    EXPECT_EQ(cli::run_cli(args), 1) << args[2];
    testing::internal::GetCapturedStdout();
    EXPECT_NE(testing::internal::GetCapturedStderr().find("--default-chat-template-kwargs"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace crl
