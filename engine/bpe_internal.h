#pragma once
// Internals shared by the source files of the byte-level BPE tokenizer, not an interface for anyone else:
// the open-addressing tables of the merge loop (bpe_tokenizer.cpp), which the tokenizer.json loader fills
// too (tokenizer_json.cpp), and the file helpers of both loaders (tiktoken_file.cpp, tokenizer_json.cpp).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/bpe_tokenizer.h"
#include "engine/heap.h"

namespace crl {

// ---------------------------------------------------------------------------------------------------------
// Byte string -> id table (open addressing; the hot lookup of tiktoken-style merging)
// ---------------------------------------------------------------------------------------------------------

class BpeTokenizer::ByteTable {
 public:
  explicit ByteTable(const std::vector<std::string>& vocab) : ByteTable(vocab.size()) {
    size_t bytes = 0;
    for (const std::string& v : vocab) bytes += v.size();
    arena_.reserve(bytes);  // (grown by doubling, a 262k-token vocabulary's arena was copied ~20 times)
    for (size_t id = 0; id < vocab.size(); ++id) {
      if (!vocab[id].empty()) insert(vocab[id], static_cast<TokenId>(id));
    }
  }
  // Empty, with room for `entries` (at most: it does not grow).
  explicit ByteTable(size_t entries) {
    size_t capacity = 16;
    while (capacity < entries * 2) capacity *= 2;
    slots_.reserve(capacity);
    prefer_huge_pages(slots_.data(), capacity * sizeof(Slot));  // (a 262k-token vocabulary: 12 MB)
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
  }
  // Adds `bytes` -> `id`; false (and nothing added) when `bytes` is there already: a duplicate byte string
  // keeps its first id.
  bool insert(std::string_view bytes, TokenId id) {
    const uint64_t h = hash(bytes.data(), bytes.size());
    size_t s = h & mask_;
    while (slots_[s].id >= 0) {
      if (slots_[s].hash == h && slots_[s].size == bytes.size() &&
          std::memcmp(arena_.data() + slots_[s].offset, bytes.data(), bytes.size()) == 0) {
        return false;
      }
      s = (s + 1) & mask_;
    }
    slots_[s] = Slot{h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(bytes.size()), id};
    arena_ += bytes;
    return true;
  }
  TokenId find(std::string_view bytes) const { return find(bytes.data(), bytes.size()); }
  // -1 when absent.
  TokenId find(const char* data, size_t size) const {
    const uint64_t h = hash(data, size);
    for (size_t s = h & mask_;; s = (s + 1) & mask_) {
      const Slot& slot = slots_[s];
      if (slot.id < 0) return -1;
      // For up to 8 bytes the hash is a bijection of the (zero-padded) bytes, so equal hashes and sizes mean
      // equal strings.
      if (slot.hash == h && slot.size == size &&
          (size <= 8 || std::memcmp(arena_.data() + slot.offset, data, size) == 0)) {
        return slot.id;
      }
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, size = 0;
    TokenId id = -1;
  };
  static uint64_t hash(const char* data, size_t size) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ size;
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
      uint64_t w;
      std::memcpy(&w, data + i, 8);
      h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
      h ^= h >> 31;
    }
    uint64_t w = 0;
    std::memcpy(&w, data + i, size - i);
    h = (h ^ w) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
};

// (left id, right id) -> (rank << 32 | merged id), open addressing: the hot lookup of merges-list ranking.
class BpeTokenizer::PairTable {
 public:
  // Empty, with room for `entries` (at most: it does not grow).
  explicit PairTable(size_t entries) {
    size_t capacity = 16;
    while (capacity < entries * 2) capacity *= 2;
    keys_.reserve(capacity);
    values_.reserve(capacity);
    prefer_huge_pages(keys_.data(), capacity * sizeof(uint64_t));  // (515k merges: 8 MB each)
    prefer_huge_pages(values_.data(), capacity * sizeof(uint64_t));
    keys_.assign(capacity, kEmpty);
    values_.assign(capacity, 0);
    mask_ = capacity - 1;
  }
  // Adds key -> value; false (and nothing changed) when the key is there already: the first one wins.
  bool insert(uint64_t key, uint64_t value) {
    size_t s = slot(key);
    while (keys_[s] != kEmpty) {
      if (keys_[s] == key) return false;
      s = (s + 1) & mask_;
    }
    keys_[s] = key;
    values_[s] = value;
    return true;
  }
  const uint64_t* find(uint64_t key) const {
    for (size_t s = slot(key);; s = (s + 1) & mask_) {
      if (keys_[s] == key) return &values_[s];
      if (keys_[s] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are < 2^31, so no real key has all bits set
  size_t slot(uint64_t key) const {
    key ^= key >> 33;
    key *= 0xFF51AFD7ED558CCDull;
    key ^= key >> 33;
    return key & mask_;
  }
  std::vector<uint64_t> keys_, values_;
  size_t mask_ = 0;
};

// ---------------------------------------------------------------------------------------------------------
// Added tokens by first byte (the split of specials and added tokens out of text)
// ---------------------------------------------------------------------------------------------------------

// For each first byte, its tokens longest first; where a byte starts many (Gemma 3 has 6,300 added tokens
// that start with '<': "<unused0>" ... and HTML tags), also its tokens' lengths and the tokens by text, so
// that the longest token at a position costs one hash lookup per length rather than one comparison per
// token (a text of '<'s would otherwise cost 6,300 comparisons a byte).
class BpeTokenizer::AddedIndex {
 public:
  AddedIndex() : by_byte_(256) {}
  // `text` must outlive the index (the tokenizer's specials_); `index` is the token's position in them. The
  // first of equal texts wins.
  void add(const std::string& text, int index) {
    ByByte& b = by_byte_[static_cast<unsigned char>(text[0])];
    if (!b.tokens.emplace(text, index).second) return;
    b.by_length.emplace_back(&text, index);
    empty_ = false;
  }
  // Orders each byte's tokens longest first and keeps the hashed form only where a byte starts many; call
  // once, after the last add().
  void finish() {
    for (ByByte& b : by_byte_) {
      std::stable_sort(b.by_length.begin(), b.by_length.end(),
                       [](const auto& x, const auto& y) { return x.first->size() > y.first->size(); });
      if (b.by_length.size() <= kLinear) {
        b.tokens.clear();
        continue;
      }
      for (const auto& [text, k] : b.by_length) {
        if (b.lengths.empty() || b.lengths.back() != text->size()) b.lengths.push_back(text->size());
      }
    }
  }
  bool empty() const { return empty_; }
  // The index of the longest token that starts at text[i], or -1.
  int longest_at(std::string_view text, size_t i) const {
    const ByByte& b = by_byte_[static_cast<unsigned char>(text[i])];
    if (b.lengths.empty()) {
      for (const auto& [token, k] : b.by_length) {
        if (text.substr(i).starts_with(*token)) return k;
      }
      return -1;
    }
    for (const size_t length : b.lengths) {
      if (length > text.size() - i) continue;
      const auto it = b.tokens.find(text.substr(i, length));
      if (it != b.tokens.end()) return it->second;
    }
    return -1;
  }

 private:
  static constexpr size_t kLinear = 16;
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  struct ByByte {
    std::vector<std::pair<const std::string*, int>> by_length;  // longest first (ties: the order added)
    std::vector<size_t> lengths;  // hashed form: the distinct lengths, longest first
    std::unordered_map<std::string_view, int, TextHash, std::equal_to<>> tokens;
  };
  std::vector<ByByte> by_byte_;
  bool empty_ = true;
};

namespace bpe_internal {

inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // SentencePiece's space, U+2581

// Reads a whole tokenizer file; throws crl::Error naming the path and `what` it should have been.
std::string read_tokenizer_file(const std::string& path, const char* what);
// "a/b/c.json" -> "a/b"; "" without a folder.
std::string path_parent(const std::string& path);
// "a/b/c.tiktoken" -> "c" (up to the first dot of the file name).
std::string file_stem(const std::string& path);

}  // namespace bpe_internal

}  // namespace crl
