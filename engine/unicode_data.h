#pragma once
// Unicode character properties for the tokenizers' pre-tokenizer patterns (\p{L}, \p{N}, \p{M}, \s, the
// letter sub-categories that o200k uses, and [\p{P}\p{S}] for DeepSeek-V3's), UTF-8 decoding, and NFC
// normalization (Qwen's tokenizer.json).
// Tables: engine/unicode_tables.inc, generated from the Unicode Character Database 15.0.0 by
// engine/unicode_tables_gen.py.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace crl::unicode {

// General category classes (the low 3 bits of properties()).
enum Category : uint8_t { kOther = 0, kLu = 1, kLl = 2, kLt = 3, kLm = 4, kLo = 5, kMark = 6, kNumber = 7 };
inline constexpr uint8_t kCategoryMask = 0x07;
inline constexpr uint8_t kWhiteSpace = 0x08;     // White_Space: what \s matches
inline constexpr uint8_t kNfcUnstable = 0x10;    // NFC_Quick_Check is No or Maybe
inline constexpr uint8_t kCombining = 0x20;      // Canonical_Combining_Class != 0
inline constexpr uint8_t kPunctOrSymbol = 0x40;  // General_Category P* or S*: [\p{P}\p{S}]

// Property bits of a code point; code points outside Unicode (and invalid UTF-8) have none.
uint8_t properties(char32_t cp);
inline bool is_letter(uint8_t props) {
  const uint8_t c = props & kCategoryMask;
  return c >= kLu && c <= kLo;
}
inline bool is_number(uint8_t props) {
  return (props & kCategoryMask) == kNumber;
}
inline bool is_space(uint8_t props) {
  return (props & kWhiteSpace) != 0;
}
inline bool is_punct_or_symbol(uint8_t props) {
  return (props & kPunctOrSymbol) != 0;
}
uint8_t combining_class(char32_t cp);

// The value decode_utf8() gives for bytes that do not form a valid UTF-8 sequence.
inline constexpr char32_t kInvalid = 0xFFFFFFFF;

// Decodes the code point at text[pos] and returns the number of bytes it spans (>= 1 when pos < size).
// Invalid UTF-8 follows the WHATWG decoder (as node's Buffer and browsers do): a maximal prefix of a valid
// sequence, or a single byte that cannot start one, is one unit with cp = kInvalid. So the pre-tokenizer
// splits invalid input exactly as tiktoken splits the same text with each such unit replaced by U+FFFD.
size_t decode_utf8(std::string_view text, size_t pos, char32_t* cp);
void append_utf8(std::string& out, char32_t cp);

// Unicode Normalization Form C. Invalid UTF-8 bytes pass through unchanged (each acts as a starter).
std::string nfc(std::string_view text);

}  // namespace crl::unicode
