#pragma once
// A deterministic, varied text corpus for comparing tokenizers with their references (tests) and for
// measuring them (bench): words in several scripts and cases, contractions, whitespace runs (tabs, CRLF,
// no-break and ideographic spaces), digit runs, punctuation, code, emoji (with ZWJ sequences and flags),
// CJK, combining marks, long runs of letters, digits and spaces, special-token look-alikes, and optionally
// invalid UTF-8.
#include <string>
#include <vector>

#include "engine/rng.h"
#include "engine/unicode_data.h"

namespace crl::tokenizer_corpus {

inline constexpr const char* kSnippets[] = {
    "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
    "def f(x):\n\treturn x ** 2  # square\n",
    "{\"key\": [1, 2.5, -3e10], \"ok\": true, \"s\": \"a\\\"b\"}",
    "https://example.com/path/to/file.html?q=1&r=two#frag",
    "SELECT name, COUNT(*) FROM users WHERE id >= 42 GROUP BY name;",
    "std::vector<std::string> v{\"x\"}; // TODO: fix\r\n",
    "    if x != None and len(y) > 0:\n        pass\n\n\n",
    "$ ls -la /usr/local/bin | grep -v '^d' > out.txt 2>&1",
    "<div class=\"a\">Hello&nbsp;world</div>",
    "I'm sure they'll say it's fine, we've done it; you're right, he'd agree. DON'T PANIC! I'M HERE, WE'LL "
    "GO.",
    "<|endoftext|>",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<|fim_prefix|>",
    "<|endofprompt|>",
    "naïve café résumé coöperate Ångström Æsir œuvre straße ſtraße",
    "Привет, как дела? Ελληνικά γράμματα. שלום עולם. مرحبا بالعالم.",
    "हिन्दी भाषा नमस्ते। ภาษาไทยสวัสดี ᐊᐃᐅ",
    "中文字符测试，日本語のテキスト、ひらがな・カタカナ。한국어 문장입니다.",
    "😀😃😄 👩‍💻 👨‍👩‍👧‍👦 🇫🇷🇯🇵 👍🏽 ❤️ ✨🎉",
    "x² + y³ = z½ Ⅻ ① ٣٤ ५६ ～１２３ ＡＢＣ",
    "ǅemal ʰaspirated ǈ Dž HTTPServer getHTTPResponseCode camelCaseWord snake_case_word",
    "e\xcc\x81 a\xcc\x80\xcc\x81 n\xcc\x83 \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8",  // combining marks,
                                                                                   // conjoining jamo
    "tab\there\vvertical\fform\x1c"
    "fs\xc2\x85nel\xe2\x80\xa8ls\xe2\x80\x8bzwsp",
};

inline std::string random_run(Rng& rng, const std::vector<std::string>& alphabet, int min, int max) {
  std::string out;
  const int n = min + static_cast<int>(rng.uniform_int(static_cast<uint32_t>(max - min + 1)));
  for (int k = 0; k < n; ++k) out += alphabet[rng.uniform_int(static_cast<uint32_t>(alphabet.size()))];
  return out;
}

inline std::string code_point_from(Rng& rng, char32_t first, char32_t last) {
  std::string out;
  unicode::append_utf8(out, first + rng.uniform_int(static_cast<uint32_t>(last - first + 1)));
  return out;
}

inline std::string fragment(Rng& rng, bool invalid_utf8) {
  static const std::vector<std::string> lower = [] {
    std::vector<std::string> v;
    for (char c = 'a'; c <= 'z'; ++c) v.emplace_back(1, c);
    return v;
  }();
  static const std::vector<std::string> upper = [] {
    std::vector<std::string> v;
    for (char c = 'A'; c <= 'Z'; ++c) v.emplace_back(1, c);
    return v;
  }();
  static const std::vector<std::string> digits = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  static const std::vector<std::string> spaces = {
      " ",    " ",   " ", "\t", "\n", "\n", "\r\n", "\r", "\xc2\xa0", "\xe3\x80\x80", "\xe2\x80\x83",
      "\x0b", "\x0c"};
  static const std::vector<std::string> punct = {
      "!",       "@", "#", "$", "%", "^", "&",  "*", "(", ")", "[",
      "]",       "{", "}", "<", ">", "/", "\\", "|", ";", ":", "'",
      "\"",      ",", ".", "?", "-", "_", "=",  "+", "`", "~", "\xe2\x80\x94",
      "\xc2\xbf"};
  static const std::vector<std::string> contractions = {"'s", "'t", "'re", "'ve", "'m", "'ll",
                                                        "'d", "'S", "'LL", "'Re", "'x", "'"};
  // Blocks of assigned characters (so that the Unicode versions of the references do not matter).
  static const std::pair<char32_t, char32_t> blocks[] = {
      {0xC0, 0xFF},       {0x100, 0x17F},    {0x391, 0x3A9},   {0x3B1, 0x3C9},   {0x410, 0x44F},
      {0x5D0, 0x5EA},     {0x627, 0x64A},    {0x905, 0x939},   {0x93E, 0x94C},   {0xE01, 0xE2E},
      {0x3041, 0x3096},   {0x30A1, 0x30FA},  {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F64F},
      {0x1F680, 0x1F6C5}, {0x300, 0x36F},    {0x2200, 0x22FF}, {0xFF01, 0xFF5E}, {0x2460, 0x24FF},
      {0x20000, 0x2A6DF}, {0x1D400, 0x1D454}};
  switch (rng.uniform_int(14)) {
    case 0:
      return random_run(rng, lower, 1, 10);
    case 1:
      return " " + random_run(rng, upper, 1, 1) + random_run(rng, lower, 0, 9);
    case 2:
      return random_run(rng, upper, 1, 6);
    case 3:
      return random_run(rng, digits, 1, 12);
    case 4:
      return random_run(rng, spaces, 1, 6);
    case 5:
      return random_run(rng, punct, 1, 4);
    case 6:
      return contractions[rng.uniform_int(static_cast<uint32_t>(std::size(contractions)))];
    case 7:
      return kSnippets[rng.uniform_int(static_cast<uint32_t>(std::size(kSnippets)))];
    case 8:
    case 9: {
      const auto& b = blocks[rng.uniform_int(static_cast<uint32_t>(std::size(blocks)))];
      std::string out;
      const int n = 1 + static_cast<int>(rng.uniform_int(6));
      for (int k = 0; k < n; ++k) out += code_point_from(rng, b.first, b.second);
      return out;
    }
    case 10: {  // long runs: the heap path of the merge, and the regex's run handling
      switch (rng.uniform_int(4)) {
        case 0:
          return random_run(rng, lower, 40, 400);
        case 1:
          return random_run(rng, digits, 20, 100);
        case 2:
          return random_run(rng, {" "}, 5, 80);
        default:
          return random_run(rng, punct, 20, 100);
      }
    }
    case 11:
      return " ";
    case 12:
      return "\n";
    default: {
      if (!invalid_utf8) return ".";
      switch (rng.uniform_int(3)) {
        case 0:
          return std::string(1, static_cast<char>(0x80 + rng.uniform_int(128)));
        case 1:
          return std::string("\xe2\x82");  // truncated 3-byte sequence
        default:
          return std::string("\xf0\x9f\x98");  // truncated 4-byte sequence
      }
    }
  }
}

// `count` strings of 1 to 16 fragments each.
inline std::vector<std::string> make(uint64_t seed, int count, bool invalid_utf8) {
  Rng rng(StreamKey{seed, 0, 0, StreamRole::kEvaluation, 0});
  std::vector<std::string> out;
  for (int k = 0; k < count; ++k) {
    std::string s;
    const int n = 1 + static_cast<int>(rng.uniform_int(16));
    for (int f = 0; f < n; ++f) s += fragment(rng, invalid_utf8);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace crl::tokenizer_corpus
