#include "engine/unicode_data.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <vector>

namespace crl::unicode {

namespace {

struct UnicodeRange {
  uint32_t first, last, value;
};
struct UnicodeDecomposition {
  uint32_t cp, first, second;  // second == 0: a singleton decomposition
};
struct UnicodeComposition {
  uint32_t first, second, composite;
};

#include "engine/unicode_tables.inc"

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kBlock = 256;

// Two-stage lookup table (block index per 256 code points, deduplicated blocks), built once from the ranges.
class PropertyTable {
 public:
  PropertyTable() {
    std::vector<uint8_t> flat(kMaxCodePoint + 1, 0);
    std::vector<uint8_t> ccc(kMaxCodePoint + 1, 0);
    for (const auto& r : kCategoryRanges) {
      for (uint32_t c = r.first; c <= r.last; ++c) flat[c] |= static_cast<uint8_t>(r.value);
    }
    for (const auto& r : kWhiteSpaceRanges) {
      for (uint32_t c = r.first; c <= r.last; ++c) flat[c] |= kWhiteSpace;
    }
    for (const auto& r : kPunctSymbolRanges) {
      for (uint32_t c = r.first; c <= r.last; ++c) flat[c] |= kPunctOrSymbol;
    }
    for (const auto& r : kNfcQuickCheckRanges) {
      for (uint32_t c = r.first; c <= r.last; ++c) flat[c] |= kNfcUnstable;
    }
    for (const auto& r : kCombiningClassRanges) {
      for (uint32_t c = r.first; c <= r.last; ++c) {
        flat[c] |= kCombining;
        ccc[c] = static_cast<uint8_t>(r.value);
      }
    }
    props_ = build(flat, &props_index_);
    ccc_ = build(ccc, &ccc_index_);
  }
  uint8_t props(char32_t cp) const {
    if (cp > kMaxCodePoint) return 0;
    return props_[props_index_[cp / kBlock] * kBlock + cp % kBlock];
  }
  uint8_t ccc(char32_t cp) const {
    if (cp > kMaxCodePoint) return 0;
    return ccc_[ccc_index_[cp / kBlock] * kBlock + cp % kBlock];
  }

 private:
  static std::vector<uint8_t> build(const std::vector<uint8_t>& flat, std::vector<uint16_t>* index) {
    std::vector<uint8_t> blocks;
    const uint32_t count = (kMaxCodePoint + 1) / kBlock;
    index->resize(count);
    std::map<std::string, uint16_t> seen;
    for (uint32_t b = 0; b < count; ++b) {
      std::string block(reinterpret_cast<const char*>(flat.data()) + b * kBlock, kBlock);
      const auto [it, added] = seen.emplace(std::move(block), static_cast<uint16_t>(seen.size()));
      if (added) blocks.insert(blocks.end(), flat.begin() + b * kBlock, flat.begin() + (b + 1) * kBlock);
      (*index)[b] = it->second;
    }
    return blocks;
  }
  std::vector<uint8_t> props_, ccc_;
  std::vector<uint16_t> props_index_, ccc_index_;
};

const PropertyTable& table() {
  static const PropertyTable instance;
  return instance;
}

// ASCII fast path: computed once from the same table.
struct AsciiProps {
  std::array<uint8_t, 128> props;
  AsciiProps() {
    for (uint32_t c = 0; c < 128; ++c) props[c] = table().props(c);
  }
};

const AsciiProps& ascii() {
  static const AsciiProps instance;
  return instance;
}

// Hangul syllables (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                   [](const UnicodeDecomposition& d, char32_t c) { return d.cp < c; });
  if (it == std::end(kDecompositions) || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto it = std::lower_bound(
      std::begin(kCompositions), std::end(kCompositions), std::pair<char32_t, char32_t>(a, b),
      [](const UnicodeComposition& c, const std::pair<char32_t, char32_t>& key) {
        return c.first != key.first ? c.first < key.first : c.second < key.second;
      });
  if (it != std::end(kCompositions) && it->first == a && it->second == b) return it->composite;
  return 0;
}

// Invalid bytes travel through normalization as private values above Unicode's range.
constexpr char32_t kRawByteBase = 0x200000;

}  // namespace

uint8_t properties(char32_t cp) {
  return cp < 128 ? ascii().props[cp] : table().props(cp);
}
uint8_t combining_class(char32_t cp) {
  return table().ccc(cp);
}

size_t decode_utf8(std::string_view text, size_t pos, char32_t* cp) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t need;
  char32_t value;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    value = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    value = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    value = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *cp = kInvalid;
    return 1;
  }
  size_t i = pos + 1;
  for (size_t k = 0; k < need; ++k, ++i) {
    if (i >= text.size() || byte(i) < lo || byte(i) > hi) {
      *cp = kInvalid;
      return i - pos;
    }
    value = (value << 6) | (byte(i) & 0x3F);
    lo = 0x80;
    hi = 0xBF;
  }
  *cp = value;
  return i - pos;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string nfc(std::string_view text) {
  // Quick check: text whose characters are all NFC_QC=Yes with combining classes in order is already NFC.
  bool stable = true;
  uint8_t last_ccc = 0;
  for (size_t i = 0; i < text.size() && stable;) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      last_ccc = 0;
      ++i;
      continue;
    }
    char32_t cp;
    i += decode_utf8(text, i, &cp);
    if (cp == kInvalid) {
      last_ccc = 0;
      continue;
    }
    const uint8_t props = properties(cp);
    if (props & kNfcUnstable) stable = false;
    const uint8_t ccc = (props & kCombining) ? combining_class(cp) : 0;
    if (ccc != 0 && last_ccc > ccc) stable = false;
    last_ccc = ccc;
  }
  if (stable) return std::string(text);

  std::vector<char32_t> buffer;
  buffer.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    const size_t length = decode_utf8(text, i, &cp);
    if (cp == kInvalid) {
      for (size_t k = 0; k < length; ++k)
        buffer.push_back(kRawByteBase + static_cast<unsigned char>(text[i + k]));
    } else {
      decompose(cp, buffer);
    }
    i += length;
  }
  const auto ccc_of = [](char32_t c) -> uint8_t { return c >= kRawByteBase ? 0 : combining_class(c); };
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < buffer.size();) {
    if (ccc_of(buffer[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < buffer.size() && ccc_of(buffer[j]) != 0) ++j;
    std::stable_sort(buffer.begin() + i, buffer.begin() + j,
                     [&](char32_t a, char32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // Canonical composition (the algorithm of UAX #15's sample code).
  if (!buffer.empty()) {
    size_t starter = 0, out = 1;
    int last_class = ccc_of(buffer[0]) == 0 ? 0 : 256;
    for (size_t i = 1; i < buffer.size(); ++i) {
      const char32_t ch = buffer[i];
      const int ch_class = ccc_of(ch);
      const char32_t composite =
          (buffer[starter] >= kRawByteBase || ch >= kRawByteBase) ? 0 : compose_pair(buffer[starter], ch);
      if (composite != 0 && (last_class < ch_class || last_class == 0)) {
        buffer[starter] = composite;
        continue;
      }
      if (ch_class == 0) starter = out;
      last_class = ch_class;
      buffer[out++] = ch;
    }
    buffer.resize(out);
  }
  std::string result;
  result.reserve(text.size());
  for (char32_t c : buffer) {
    if (c >= kRawByteBase) {
      result += static_cast<char>(c - kRawByteBase);
    } else {
      append_utf8(result, c);
    }
  }
  return result;
}

}  // namespace crl::unicode
