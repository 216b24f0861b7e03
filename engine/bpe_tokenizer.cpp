#include "engine/bpe_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <shared_mutex>
#include <sstream>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "engine/sha256.h"
#include "engine/unicode_data.h"

namespace crl {

// ---------------------------------------------------------------------------------------------------------
// Split patterns
// ---------------------------------------------------------------------------------------------------------

namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kCl100kRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kO200kRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Unit {
  uint32_t begin;
  char32_t cp;
  uint8_t props;
};

// One scan of the text, then the leftmost-first match of the pattern's alternatives at each position.
class Splitter {
 public:
  Splitter(SplitPattern pattern, std::string_view text) : pattern_(pattern) {
    units_.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      char32_t cp;
      const size_t length = unicode::decode_utf8(text, i, &cp);
      units_.push_back(
          Unit{static_cast<uint32_t>(i), cp, cp == unicode::kInvalid ? uint8_t{0} : unicode::properties(cp)});
      i += length;
    }
    n_ = units_.size();
    end_ = text.size();
  }

  std::vector<size_t> split() {
    std::vector<size_t> ends;
    size_t i = 0;
    while (i < n_) {
      size_t e = match(i);
      CRL_CHECK(e > i, "the split pattern matched nothing at unit " << i);
      ends.push_back(e < n_ ? units_[e].begin : end_);
      i = e;
    }
    return ends;
  }

 private:
  bool L(size_t k) const { return k < n_ && unicode::is_letter(units_[k].props); }
  bool N(size_t k) const { return k < n_ && unicode::is_number(units_[k].props); }
  bool S(size_t k) const { return k < n_ && unicode::is_space(units_[k].props); }
  bool R(size_t k) const { return k < n_ && (units_[k].cp == '\r' || units_[k].cp == '\n'); }
  bool P(size_t k) const { return k < n_ && !S(k) && !L(k) && !N(k); }       // [^\s\p{L}\p{N}]
  bool Prefix(size_t k) const { return k < n_ && !R(k) && !L(k) && !N(k); }  // [^\r\n\p{L}\p{N}]
  char32_t cp(size_t k) const { return k < n_ ? units_[k].cp : 0; }
  uint8_t cat(size_t k) const { return k < n_ ? (units_[k].props & unicode::kCategoryMask) : 0; }
  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  bool Upper(size_t k) const {
    const uint8_t c = cat(k);
    return k < n_ && (c == unicode::kLu || c == unicode::kLt || c == unicode::kLm || c == unicode::kLo ||
                      c == unicode::kMark);
  }
  // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
  bool Lower(size_t k) const {
    const uint8_t c = cat(k);
    return k < n_ && (c == unicode::kLl || c == unicode::kLm || c == unicode::kLo || c == unicode::kMark);
  }
  // Simple case folding, as (?i) applies it to the contraction letters (U+017F LONG S folds to s).
  char32_t fold(char32_t c) const {
    if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
    if (c == 0x17F) return 's';
    return c;
  }
  // 's|'t|'re|'ve|'m|'ll|'d at k; returns the length in units or 0.
  size_t contraction(size_t k, bool ignore_case) const {
    if (cp(k) != '\'') return 0;
    const auto f = [&](size_t j) { return ignore_case ? fold(cp(j)) : cp(j); };
    const char32_t a = f(k + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    const char32_t b = f(k + 2);
    if ((a == 'r' || a == 'v') && b == 'e') return 3;
    if (a == 'l' && b == 'l') return 3;
    return 0;
  }
  size_t space_run_end(size_t k) const {
    while (S(k)) ++k;
    return k;
  }
  // \s*[\r\n]+ : the whitespace run up to and including its last line break.
  size_t spaces_then_newlines(size_t i, size_t run_end) const {
    for (size_t k = run_end; k > i; --k) {
      if (R(k - 1)) return k;
    }
    return 0;
  }
  // \s+(?!\S) then \s+.
  size_t trailing_spaces(size_t i, size_t run_end) const {
    if (run_end == n_ || run_end - i < 2) return run_end;
    return run_end - 1;
  }

  size_t match(size_t i) const {
    switch (pattern_) {
      case SplitPattern::kGpt2:
        return match_gpt2(i);
      case SplitPattern::kCl100k:
        return match_cl100k(i, 3);
      case SplitPattern::kQwen2:
        return match_cl100k(i, 1);
      case SplitPattern::kO200k:
        return match_o200k(i);
    }
    return i + 1;
  }

  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  size_t match_gpt2(size_t i) const {
    if (const size_t c = contraction(i, false)) return i + c;
    const size_t j = cp(i) == ' ' ? i + 1 : i;  // " ?" (without it, the class below cannot match a space)
    if (L(j)) return run(j, &Splitter::L);
    if (N(j)) return run(j, &Splitter::N);
    if (P(j)) return run(j, &Splitter::P);
    return trailing_spaces(i, space_run_end(i));
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  size_t match_cl100k(size_t i, size_t max_digits) const {
    if (const size_t c = contraction(i, true)) return i + c;
    if (L(i)) return run(i, &Splitter::L);
    if (Prefix(i) && L(i + 1)) return run(i + 1, &Splitter::L);
    if (N(i)) {
      size_t e = i;
      while (e - i < max_digits && N(e)) ++e;
      return e;
    }
    const size_t j = cp(i) == ' ' ? i + 1 : i;
    if (P(j)) return run(run(j, &Splitter::P), &Splitter::R);
    const size_t run_end = space_run_end(i);
    if (const size_t e = spaces_then_newlines(i, run_end)) return e;
    return trailing_spaces(i, run_end);
  }

  // [^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]*[Ll Lm Lo M]+(?i:'s|...)?|[^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]+[Ll Lm Lo
  // M]*
  // (?i:'s|...)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  size_t match_o200k(size_t i) const {
    // The optional prefix is tried taken first, then not taken (a mark can be either).
    const size_t starts[2] = {Prefix(i) ? i + 1 : SIZE_MAX, i};
    for (size_t s : starts) {  // first alternative
      if (s == SIZE_MAX) continue;
      const size_t u = run(s, &Splitter::Upper);
      // Backtracking [Upper]* from its longest run: the first position k (from the right) where [Lower]+ can
      // start; [Lower]+ then runs greedily from k.
      for (size_t k = u + 1; k-- > s;) {
        if (Lower(k)) {
          const size_t e = run(k, &Splitter::Lower);
          return e + contraction(e, true);
        }
      }
    }
    for (size_t s : starts) {  // second alternative
      if (s == SIZE_MAX) continue;
      const size_t u = run(s, &Splitter::Upper);
      if (u > s) {
        const size_t e = run(u, &Splitter::Lower);
        return e + contraction(e, true);
      }
    }
    if (N(i)) {
      size_t e = i;
      while (e - i < 3 && N(e)) ++e;
      return e;
    }
    const size_t j = cp(i) == ' ' ? i + 1 : i;
    if (P(j)) {
      size_t e = run(j, &Splitter::P);
      while (R(e) || cp(e) == '/') ++e;
      return e;
    }
    const size_t run_end = space_run_end(i);
    if (const size_t e = spaces_then_newlines(i, run_end)) return e;
    return trailing_spaces(i, run_end);
  }

  size_t run(size_t k, bool (Splitter::*in)(size_t) const) const {
    while ((this->*in)(k)) ++k;
    return k;
  }

  SplitPattern pattern_;
  std::vector<Unit> units_;
  size_t n_ = 0, end_ = 0;
};

}  // namespace

std::optional<SplitPattern> split_pattern_from_name(std::string_view name) {
  if (name == "gpt2" || name == "r50k" || name == "p50k") return SplitPattern::kGpt2;
  if (name == "cl100k") return SplitPattern::kCl100k;
  if (name == "o200k") return SplitPattern::kO200k;
  if (name == "qwen2") return SplitPattern::kQwen2;
  return std::nullopt;
}

std::string_view split_pattern_name(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return "gpt2";
    case SplitPattern::kCl100k:
      return "cl100k";
    case SplitPattern::kO200k:
      return "o200k";
    case SplitPattern::kQwen2:
      return "qwen2";
  }
  return "?";
}

std::string_view split_pattern_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return kGpt2Regex;
    case SplitPattern::kCl100k:
      return kCl100kRegex;
    case SplitPattern::kO200k:
      return kO200kRegex;
    case SplitPattern::kQwen2:
      return kQwen2Regex;
  }
  return "";
}

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  for (SplitPattern p :
       {SplitPattern::kGpt2, SplitPattern::kCl100k, SplitPattern::kO200k, SplitPattern::kQwen2}) {
    if (regex == split_pattern_regex(p)) return p;
  }
  return std::nullopt;
}

std::vector<size_t> pre_tokenize(SplitPattern pattern, std::string_view text) {
  return Splitter(pattern, text).split();
}

// ---------------------------------------------------------------------------------------------------------
// Byte string -> id table (open addressing; the hot lookup of tiktoken-style merging)
// ---------------------------------------------------------------------------------------------------------

class BpeTokenizer::ByteTable {
 public:
  explicit ByteTable(const std::vector<std::string>& vocab) {
    size_t capacity = 16;
    while (capacity < vocab.size() * 2) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (size_t id = 0; id < vocab.size(); ++id) {
      if (!vocab[id].empty()) insert(vocab[id], static_cast<TokenId>(id));
    }
  }
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
  void insert(const std::string& bytes, TokenId id) {
    const uint64_t h = hash(bytes.data(), bytes.size());
    size_t s = h & mask_;
    while (slots_[s].id >= 0) {
      if (slots_[s].hash == h && slots_[s].size == bytes.size() &&
          std::memcmp(arena_.data() + slots_[s].offset, bytes.data(), bytes.size()) == 0) {
        return;  // a duplicate byte string keeps its first (lowest) id
      }
      s = (s + 1) & mask_;
    }
    slots_[s] = Slot{h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(bytes.size()), id};
    arena_ += bytes;
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
};

// (left id, right id) -> (rank << 32 | merged id), open addressing: the hot lookup of merges-list ranking.
class BpeTokenizer::PairTable {
 public:
  explicit PairTable(const std::unordered_map<uint64_t, uint64_t>& pairs) {
    size_t capacity = 16;
    while (capacity < pairs.size() * 2) capacity *= 2;
    keys_.assign(capacity, kEmpty);
    values_.assign(capacity, 0);
    mask_ = capacity - 1;
    for (const auto& [key, value] : pairs) {
      size_t s = slot(key);
      while (keys_[s] != kEmpty) s = (s + 1) & mask_;
      keys_[s] = key;
      values_[s] = value;
    }
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
// Encoding
// ---------------------------------------------------------------------------------------------------------

inline std::optional<std::pair<uint32_t, TokenId>> BpeTokenizer::merge_rank(std::string_view piece,
                                                                            uint32_t a, uint32_t, uint32_t b,
                                                                            TokenId left,
                                                                            TokenId right) const {
  if (tiktoken_) {
    const TokenId id =
        b - a == 2
            ? pair_ids_[static_cast<unsigned char>(piece[a]) << 8 | static_cast<unsigned char>(piece[a + 1])]
            : table_->find(piece.data() + a, b - a);
    if (id < 0) return std::nullopt;
    return std::pair<uint32_t, TokenId>(static_cast<uint32_t>(id), id);
  }
  const uint64_t* found = merges_->find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                                        static_cast<uint32_t>(right));
  if (found == nullptr) return std::nullopt;
  return std::pair<uint32_t, TokenId>(static_cast<uint32_t>(*found >> 32),
                                      static_cast<TokenId>(*found & 0xFFFFFFFF));
}

// Pieces already merged, shared by all threads: sharded maps under reader-writer locks. A shard that fills
// up is cleared (text repeats its frequent pieces quickly). Only a speed-up: results never depend on it.
class BpeTokenizer::PieceCache {
 public:
  static constexpr size_t kMaxPieceBytes = 64;
  bool find(std::string_view piece, std::vector<TokenId>& out) const {
    const Shard& shard = shard_of(piece);
    std::shared_lock lock(shard.mutex);
    const auto it = shard.map.find(std::string(piece));
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void clear() {
    for (Shard& shard : shards_) {
      std::unique_lock lock(shard.mutex);
      shard.map.clear();
    }
  }
  void insert(std::string_view piece, std::span<const TokenId> ids) {
    Shard& shard = shard_of(piece);
    std::unique_lock lock(shard.mutex);
    if (shard.map.size() >= kMaxPerShard) shard.map.clear();
    shard.map.emplace(std::string(piece), std::vector<TokenId>(ids.begin(), ids.end()));
  }

 private:
  static constexpr size_t kShards = 16, kMaxPerShard = 16384;
  struct Shard {
    mutable std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<TokenId>> map;
  };
  Shard& shard_of(std::string_view piece) const {
    return shards_[std::hash<std::string_view>()(piece) % kShards];
  }
  mutable Shard shards_[kShards];
};

void BpeTokenizer::clear_cache() const {
  cache_->clear();
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<TokenId>& out) const {
  const auto& bytes = reinterpret_cast<const unsigned char*>(piece.data());
  if (piece.size() == 1) {
    out.push_back(byte_ids_[bytes[0]]);
    return;
  }
  if (tiktoken_ || ignore_merges_) {
    const TokenId whole = table_->find(piece.data(), piece.size());
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  if (piece.size() > PieceCache::kMaxPieceBytes) return merge_piece(piece, out);
  if (cache_->find(piece, out)) return;
  const size_t before = out.size();
  merge_piece(piece, out);
  cache_->insert(piece, std::span<const TokenId>(out).subspan(before));
}

void BpeTokenizer::merge_piece(std::string_view piece, std::vector<TokenId>& out) const {
  const auto& bytes = reinterpret_cast<const unsigned char*>(piece.data());
  constexpr uint32_t kNone = UINT32_MAX;
  const uint32_t n = static_cast<uint32_t>(piece.size());
  if (n <= 48) {
    // Linear scan (tiktoken's algorithm): parts are [start[k], start[k+1]); rank[k] merges parts k and k+1.
    uint32_t start[50];
    TokenId ids[50];
    uint32_t rank[50];
    TokenId merged[50];
    uint32_t count = n;
    for (uint32_t k = 0; k <= n; ++k) start[k] = k;
    for (uint32_t k = 0; k < n; ++k) ids[k] = byte_ids_[bytes[k]];
    const auto compute = [&](uint32_t k) {
      if (k + 1 >= count) return;
      const auto r = merge_rank(piece, start[k], start[k + 1], start[k + 2], ids[k], ids[k + 1]);
      rank[k] = r ? r->first : kNone;
      merged[k] = r ? r->second : 0;
    };
    for (uint32_t k = 0; k + 1 < count; ++k) compute(k);
    while (count > 1) {
      uint32_t best = kNone, at = 0;
      for (uint32_t k = 0; k + 1 < count; ++k) {
        if (rank[k] < best) {
          best = rank[k];
          at = k;
        }
      }
      if (best == kNone) break;
      ids[at] = merged[at];
      for (uint32_t k = at + 1; k + 1 < count; ++k) {
        start[k] = start[k + 1];
        ids[k] = ids[k + 1];
        rank[k] = rank[k + 1];
        merged[k] = merged[k + 1];
      }
      start[count - 1] = start[count];
      --count;
      compute(at);
      if (at > 0) compute(at - 1);
    }
    for (uint32_t k = 0; k < count; ++k) {
      out.push_back(tiktoken_ ? table_->find(piece.data() + start[k], start[k + 1] - start[k]) : ids[k]);
    }
    return;
  }
  // Long pieces: a doubly linked list of parts (indexed by their first byte) and a min-heap of candidate
  // merges ordered by (rank, position); stale candidates are skipped when popped. O(n log n).
  std::vector<uint32_t> next(n), prev(n);
  std::vector<TokenId> ids(n);
  std::vector<char> alive(n, 1);
  for (uint32_t k = 0; k < n; ++k) {
    next[k] = k + 1;
    prev[k] = k == 0 ? kNone : k - 1;
    ids[k] = byte_ids_[bytes[k]];
  }
  struct Candidate {
    uint32_t rank, left, right, right_end;
    TokenId id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  const auto push = [&](uint32_t left) {
    if (left == kNone || next[left] >= n) return;
    const uint32_t right = next[left];
    const auto r = merge_rank(piece, left, right, next[right], ids[left], ids[right]);
    if (r) heap.push(Candidate{r->first, left, right, next[right], r->second});
  };
  for (uint32_t k = 0; k + 1 < n; ++k) push(k);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || next[c.left] != c.right || next[c.right] != c.right_end) continue;
    ids[c.left] = c.id;
    alive[c.right] = 0;
    next[c.left] = c.right_end;
    if (c.right_end < n) prev[c.right_end] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  for (uint32_t k = 0; k < n; k = next[k]) {
    out.push_back(tiktoken_ ? table_->find(piece.data() + k, next[k] - k) : ids[k]);
  }
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  std::string normalized;
  if (nfc_) {
    normalized = unicode::nfc(text);
    text = normalized;
  }
  size_t begin = 0;
  for (size_t end : pre_tokenize(pattern_, text)) {
    encode_piece(text.substr(begin, end - begin), out);
    begin = end;
  }
}

std::vector<TokenId> BpeTokenizer::encode_ordinary(std::string_view text) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_text(text, ids);
  return ids;
}

const SpecialToken* BpeTokenizer::special_at(std::string_view text, size_t i) const {
  for (int index : specials_by_byte_[static_cast<unsigned char>(text[i])]) {
    if (text.substr(i).starts_with(specials_[index].text)) return &specials_[index];
  }
  return nullptr;
}

std::vector<TokenId> BpeTokenizer::encode_pieces(std::span<const TextPiece> pieces) const {
  std::vector<TokenId> ids;
  std::string pending;  // ordinary text not encoded yet: it may continue in the next piece
  for (const TextPiece& piece : pieces) {
    const std::string_view text = piece.text;
    if (!piece.special) {
      pending += text;
      continue;
    }
    size_t chunk = 0;
    for (size_t i = 0; i < text.size();) {
      const SpecialToken* found = special_at(text, i);
      if (found == nullptr) {
        ++i;
        continue;
      }
      pending += text.substr(chunk, i - chunk);
      encode_text(pending, ids);
      pending.clear();
      ids.push_back(found->id);
      i += found->text.size();
      chunk = i;
    }
    pending += text.substr(chunk);
  }
  encode_text(pending, ids);
  return ids;
}

std::vector<TokenId> BpeTokenizer::encode(std::string_view text) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  size_t chunk = 0;
  for (size_t i = 0; i < text.size();) {
    const SpecialToken* found = special_at(text, i);
    if (found == nullptr) {
      ++i;
      continue;
    }
    encode_text(text.substr(chunk, i - chunk), ids);
    ids.push_back(found->id);
    i += found->text.size();
    chunk = i;
  }
  encode_text(text.substr(chunk), ids);
  return ids;
}

std::string BpeTokenizer::decode(std::span<const TokenId> ids) const {
  std::string text;
  for (TokenId id : ids) {
    if (id >= 0 && static_cast<size_t>(id) < vocab_.size() && !vocab_[id].empty()) {
      text += vocab_[id];
    } else {
      text += "<|unk:" + std::to_string(id) + "|>";
    }
  }
  return text;
}

std::optional<TokenId> BpeTokenizer::special_token(std::string_view text) const {
  for (const SpecialToken& s : specials_) {
    if (s.text == text) return s.id;
  }
  return std::nullopt;
}

// Checks the vocabulary, indexes it and the special tokens, and computes the fingerprint over the canonical
// definition: pattern, normalization, ranking rule, every (id, bytes), the merges in rank order and the
// special tokens.
void BpeTokenizer::finish() {
  std::sort(specials_.begin(), specials_.end(),
            [](const SpecialToken& a, const SpecialToken& b) { return a.id < b.id; });
  TokenId max_id = static_cast<TokenId>(vocab_.size()) - 1;
  for (const SpecialToken& s : specials_) max_id = std::max(max_id, s.id);
  vocab_.resize(static_cast<size_t>(max_id) + 1);
  vocab_size_ = max_id + 1;
  table_ = std::make_shared<ByteTable>(vocab_);
  cache_ = std::make_shared<PieceCache>();
  pair_ids_.resize(65536);
  for (int pair = 0; pair < 65536; ++pair) {
    const char bytes[2] = {static_cast<char>(pair >> 8), static_cast<char>(pair & 0xFF)};
    pair_ids_[pair] = table_->find(bytes, 2);
  }
  for (const SpecialToken& s : specials_) vocab_[s.id] = s.text;  // after the table: specials are not BPE
  specials_by_byte_.assign(256, {});
  for (size_t k = 0; k < specials_.size(); ++k) {
    specials_by_byte_[static_cast<unsigned char>(specials_[k].text[0])].push_back(static_cast<int>(k));
  }
  for (auto& list : specials_by_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [&](int a, int b) { return specials_[a].text.size() > specials_[b].text.size(); });
  }
  Sha256 sha;
  sha.update("crl-bpe/v1|");
  sha.update(split_pattern_name(pattern_));
  sha.update(nfc_ ? "|nfc|" : "|none|");
  sha.update(tiktoken_ ? "ranks|" : (ignore_merges_ ? "merges-ignore|" : "merges|"));
  sha.update_u64(vocab_.size());
  for (size_t id = 0; id < vocab_.size(); ++id) {
    sha.update_u64(vocab_[id].size());
    sha.update(vocab_[id]);
  }
  sha.update_u64(merge_list_.size());
  for (const auto& [a, b] : merge_list_) {
    sha.update_u64(static_cast<uint64_t>(a));
    sha.update_u64(static_cast<uint64_t>(b));
  }
  sha.update_u64(specials_.size());
  for (const SpecialToken& s : specials_) {
    sha.update_u64(static_cast<uint64_t>(s.id));
    sha.update_u64(s.text.size());
    sha.update(s.text);
  }
  fingerprint_ = sha.hex_digest().substr(0, 16);
}

// ---------------------------------------------------------------------------------------------------------
// tiktoken
// ---------------------------------------------------------------------------------------------------------

std::shared_ptr<const BpeTokenizer> BpeTokenizer::from_ranks(std::string name,
                                                             std::vector<std::string> tokens_by_rank,
                                                             SplitPattern pattern,
                                                             std::vector<SpecialToken> specials) {
  std::shared_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->name_ = std::move(name);
  t->pattern_ = pattern;
  t->tiktoken_ = true;
  t->vocab_ = std::move(tokens_by_rank);
  t->specials_ = std::move(specials);
  for (const SpecialToken& s : t->specials_) {
    if (s.text.empty()) throw Error(t->name_, "special tokens", "a special token is empty");
    if (s.id >= 0 && static_cast<size_t>(s.id) < t->vocab_.size() && !t->vocab_[s.id].empty()) {
      throw Error(t->name_, "special tokens",
                  "special token " + quote(s.text) + " has id " + std::to_string(s.id) + ", already a rank");
    }
  }
  t->finish();
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    const TokenId id = t->table_->find(&c, 1);
    if (id < 0) throw Error(t->name_, "ranks", "no rank for the single byte " + std::to_string(b));
    t->byte_ids_[b] = id;
  }
  return t;
}

namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool base64_decode(std::string_view in, std::string* out) {
  out->clear();
  uint32_t buffer = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < in.size() && in[i] != '='; ++i) {
    const int v = base64_value(in[i]);
    if (v < 0) return false;
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      *out += static_cast<char>((buffer >> bits) & 0xFF);
    }
  }
  for (; i < in.size(); ++i) {
    if (in[i] != '=') return false;
  }
  return (in.size() % 4) == 0 || in.find('=') == std::string_view::npos;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "", std::string("cannot open the ") + what + " (missing or unreadable)");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string fs_path_parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::string file_stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = base.find('.');
  return dot == std::string::npos ? base : base.substr(0, dot);
}

}  // namespace

std::shared_ptr<const BpeTokenizer> BpeTokenizer::load_tiktoken(const std::string& path, SplitPattern pattern,
                                                                std::vector<SpecialToken> specials) {
  const std::string data = read_file(path, "tiktoken rank file");
  std::vector<std::string> tokens;
  size_t line_no = 0;
  std::string bytes;
  for (size_t pos = 0; pos < data.size();) {
    size_t eol = data.find('\n', pos);
    if (eol == std::string::npos) eol = data.size();
    std::string_view line(data.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) {
      throw Error(where, "line", "expected \"BASE64 RANK\", found " + quote(std::string(line.substr(0, 80))));
    }
    if (!base64_decode(line.substr(0, space), &bytes) || bytes.empty()) {
      throw Error(where, "token", "not base64: " + quote(std::string(line.substr(0, space))));
    }
    const std::string_view rank_text = line.substr(space + 1);
    int64_t rank = 0;
    bool ok = !rank_text.empty() && rank_text.size() < 10;
    for (char c : rank_text) {
      if (c < '0' || c > '9') ok = false;
      rank = rank * 10 + (c - '0');
    }
    if (!ok) throw Error(where, "rank", "not a non-negative integer: " + quote(std::string(rank_text)));
    if (static_cast<size_t>(rank) >= tokens.size()) tokens.resize(static_cast<size_t>(rank) + 1);
    if (!tokens[rank].empty()) throw Error(where, "rank", "rank " + std::to_string(rank) + " appears twice");
    tokens[rank] = bytes;
  }
  if (tokens.empty()) throw Error(path, "", "the tiktoken rank file has no ranks");
  for (size_t r = 0; r < tokens.size(); ++r) {
    if (tokens[r].empty()) {
      bool special = false;
      for (const SpecialToken& s : specials) special = special || s.id == static_cast<TokenId>(r);
      if (!special) throw Error(path, "rank", "rank " + std::to_string(r) + " is missing");
    }
  }
  return from_ranks(file_stem(path), std::move(tokens), pattern, std::move(specials));
}

std::optional<std::pair<SplitPattern, std::vector<SpecialToken>>> tiktoken_encoding(
    std::string_view encoding) {
  using Specials = std::vector<SpecialToken>;
  if (encoding == "r50k_base" || encoding == "p50k_base" || encoding == "gpt2") {
    return std::pair{SplitPattern::kGpt2, Specials{{"<|endoftext|>", 50256}}};
  }
  if (encoding == "p50k_edit") {
    return std::pair{SplitPattern::kGpt2, Specials{{"<|endoftext|>", 50256},
                                                   {"<|fim_prefix|>", 50281},
                                                   {"<|fim_middle|>", 50282},
                                                   {"<|fim_suffix|>", 50283}}};
  }
  if (encoding == "cl100k_base") {
    return std::pair{SplitPattern::kCl100k, Specials{{"<|endoftext|>", 100257},
                                                     {"<|fim_prefix|>", 100258},
                                                     {"<|fim_middle|>", 100259},
                                                     {"<|fim_suffix|>", 100260},
                                                     {"<|im_start|>", 100264},
                                                     {"<|im_end|>", 100265},
                                                     {"<|im_sep|>", 100266},
                                                     {"<|endofprompt|>", 100276}}};
  }
  if (encoding == "o200k_base") {
    return std::pair{SplitPattern::kO200k, Specials{{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}};
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------------------
// tokenizer.json
// ---------------------------------------------------------------------------------------------------------

namespace {

// GPT-2's byte <-> printable character map (bytes_to_unicode in the GPT-2 sources): printable Latin-1
// bytes map to themselves, the others to U+0100 onwards in byte order.
struct ByteLevelAlphabet {
  char32_t to_char[256];
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteLevelAlphabet() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteLevelAlphabet& byte_level() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

// Converts a vocabulary string in the byte-level alphabet to raw bytes; nullopt if it has another character.
std::optional<std::string> byte_level_decode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    i += unicode::decode_utf8(text, i, &cp);
    const auto it = byte_level().to_byte.find(cp);
    if (it == byte_level().to_byte.end()) return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}

using Json = nlohmann::json;

const Json& member(const Json& object, const char* key, const std::string& path, const std::string& field) {
  if (!object.is_object() || !object.contains(key)) throw Error(path, field + "." + key, "missing");
  return object.at(key);
}

std::string type_of(const Json& object) {
  return object.is_object() && object.contains("type") && object["type"].is_string()
             ? object["type"].get<std::string>()
             : "";
}

void check_byte_level(const Json& node, const std::string& path, const std::string& field, bool use_regex) {
  if (node.value("add_prefix_space", false)) {
    throw Error(path, field + ".add_prefix_space", "true is not supported (expected false)");
  }
  if (node.value("use_regex", true) != use_regex) {
    throw Error(path, field + ".use_regex", std::string("expected ") + (use_regex ? "true" : "false"));
  }
}

}  // namespace

std::shared_ptr<const BpeTokenizer> BpeTokenizer::load_hf_json(const std::string& path) {
  const std::string data = read_file(path, "tokenizer.json");
  // The shared reader: depth limit, duplicate keys (a vocabulary listing a token twice is refused rather
  // than read as its last entry), short syntax errors naming the byte offset.
  const Json root = read_json(data, path);
  if (!root.is_object()) throw Error(path, "", "expected a JSON object");
  std::shared_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->tiktoken_ = false;
  {  // name: the model's folder (the one holding the file, or above a "models" folder), else the file's stem
    std::vector<std::string> parts;
    std::stringstream split(fs_path_parent(path));
    for (std::string part; std::getline(split, part, '/');) {
      if (!part.empty() && part != ".") parts.push_back(part);
    }
    while (!parts.empty() && (parts.back() == "models" || parts.back() == "..")) parts.pop_back();
    t->name_ = "hf:" + (parts.empty() ? file_stem(path) : parts.back());
  }

  // normalizer: none or NFC.
  const Json& normalizer = root.contains("normalizer") ? root["normalizer"] : Json();
  if (!normalizer.is_null()) {
    const std::string type = type_of(normalizer);
    if (type == "NFC") {
      t->nfc_ = true;
    } else if (!(type == "Sequence" && normalizer.contains("normalizers") &&
                 normalizer["normalizers"].empty())) {
      throw Error(path, "normalizer.type",
                  "unsupported normalizer " + quote(type) + " (supported: null, NFC)");
    }
  }

  // pre_tokenizer: ByteLevel with its built-in GPT-2 regex, or Sequence[Split(regex), ByteLevel(no regex)].
  const Json& pre = member(root, "pre_tokenizer", path, "");
  const std::string pre_type = type_of(pre);
  if (pre_type == "ByteLevel") {
    check_byte_level(pre, path, "pre_tokenizer", true);
    t->pattern_ = SplitPattern::kGpt2;
  } else if (pre_type == "Sequence") {
    const Json& list = member(pre, "pretokenizers", path, "pre_tokenizer");
    if (!list.is_array() || list.size() != 2 || type_of(list[0]) != "Split" ||
        type_of(list[1]) != "ByteLevel") {
      throw Error(path, "pre_tokenizer.pretokenizers", "expected [Split, ByteLevel]");
    }
    const Json& split = list[0];
    const std::string field = "pre_tokenizer.pretokenizers[0]";
    const Json& pattern = member(split, "pattern", path, field);
    if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string()) {
      throw Error(path, field + ".pattern", "expected {\"Regex\": \"...\"}");
    }
    const auto p = split_pattern_from_regex(pattern["Regex"].get<std::string>());
    if (!p) {
      throw Error(path, field + ".pattern.Regex",
                  "unsupported split regex " + quote(pattern["Regex"].get<std::string>()) +
                      " (supported: the GPT-2, cl100k, o200k and Qwen2 patterns)");
    }
    if (split.value("behavior", std::string()) != "Isolated" || split.value("invert", false)) {
      throw Error(path, field + ".behavior", "expected \"Isolated\" with invert false");
    }
    check_byte_level(list[1], path, "pre_tokenizer.pretokenizers[1]", false);
    t->pattern_ = *p;
  } else {
    throw Error(path, "pre_tokenizer.type",
                "unsupported pre-tokenizer " + quote(pre_type) +
                    " (expected ByteLevel or Sequence[Split, ByteLevel])");
  }
  if (root.contains("decoder") && !root["decoder"].is_null() && type_of(root["decoder"]) != "ByteLevel") {
    throw Error(path, "decoder.type", "expected \"ByteLevel\", found " + quote(type_of(root["decoder"])));
  }

  // model: BPE over the byte-level alphabet.
  const Json& model = member(root, "model", path, "");
  if (model.contains("type") && type_of(model) != "BPE") {
    throw Error(path, "model.type", "expected \"BPE\", found " + quote(type_of(model)));
  }
  if (model.value("byte_fallback", false)) throw Error(path, "model.byte_fallback", "true is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      throw Error(path, std::string("model.") + key, "must be empty for a byte-level BPE");
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
    throw Error(path, "model.dropout", "dropout is not supported");
  }
  t->ignore_merges_ = model.value("ignore_merges", false);
  const Json& vocab = member(model, "vocab", path, "model");
  if (!vocab.is_object()) throw Error(path, "model.vocab", "expected an object {token: id}");
  std::unordered_map<std::string, TokenId> ids;  // byte-level spelling -> id
  for (const auto& [key, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > (1 << 30)) {
      throw Error(path, "model.vocab[" + quote(key) + "]", "expected a non-negative integer id");
    }
    const TokenId id = value.get<TokenId>();
    const auto bytes = byte_level_decode(key);
    if (!bytes || bytes->empty()) {
      throw Error(path, "model.vocab[" + quote(key) + "]",
                  "not a byte-level token (character outside the alphabet)");
    }
    if (static_cast<size_t>(id) >= t->vocab_.size()) t->vocab_.resize(static_cast<size_t>(id) + 1);
    if (!t->vocab_[id].empty())
      throw Error(path, "model.vocab[" + quote(key) + "]", "duplicate id " + std::to_string(id));
    t->vocab_[id] = *bytes;
    ids.emplace(key, id);
  }
  for (int b = 0; b < 256; ++b) {
    std::string key;
    unicode::append_utf8(key, byte_level().to_char[b]);
    const auto it = ids.find(key);
    if (it == ids.end())
      throw Error(path, "model.vocab", "no token for the byte " + std::to_string(b) + " (" + key + ")");
    t->byte_ids_[b] = it->second;
  }
  const Json& merges = member(model, "merges", path, "model");
  if (!merges.is_array()) throw Error(path, "model.merges", "expected an array");
  t->merge_list_.reserve(merges.size());
  std::unordered_map<uint64_t, uint64_t> merge_map;
  merge_map.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string field = "model.merges[" + std::to_string(r) + "]";
    std::string left, right;
    const Json& m = merges[r];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        throw Error(path, field, "expected \"LEFT RIGHT\", found " + quote(s));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      throw Error(path, field, "expected \"LEFT RIGHT\" or [LEFT, RIGHT]");
    }
    const auto a = ids.find(left), b = ids.find(right), c = ids.find(left + right);
    if (a == ids.end() || b == ids.end() || c == ids.end()) {
      throw Error(path, field,
                  "a part or the merge of " + quote(left) + " + " + quote(right) + " is not in model.vocab");
    }
    const uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(a->second)) << 32) | static_cast<uint32_t>(b->second);
    merge_map.emplace(key,
                      (static_cast<uint64_t>(r) << 32) | static_cast<uint32_t>(c->second));  // first wins
    t->merge_list_.emplace_back(a->second, b->second);
  }

  t->merges_ = std::make_shared<PairTable>(merge_map);

  // added_tokens: split out before normalization and pre-tokenization.
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const Json& added = root["added_tokens"];
    if (!added.is_array()) throw Error(path, "added_tokens", "expected an array");
    for (size_t k = 0; k < added.size(); ++k) {
      const std::string field = "added_tokens[" + std::to_string(k) + "]";
      const Json& a = added[k];
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string() || a["content"].get<std::string>().empty()) {
        throw Error(path, field, "expected {\"id\": N, \"content\": \"...\"}");
      }
      if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false)) {
        throw Error(path, field, "lstrip, rstrip and single_word are not supported");
      }
      const TokenId id = a["id"].get<TokenId>();
      if (id < 0) throw Error(path, field + ".id", "negative id");
      if (static_cast<size_t>(id) < t->vocab_.size() && !t->vocab_[id].empty()) {
        // An added token may repeat a vocabulary entry; it is then split out with that id all the same.
        t->vocab_[id].clear();
      }
      t->specials_.push_back(SpecialToken{a["content"].get<std::string>(), id});
    }
  }
  t->finish();
  return t;
}

}  // namespace crl
