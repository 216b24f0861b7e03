// The byte-level BPE tokenizer's core (engine/bpe_tokenizer.h): special tokens, pre-tokenized pieces, the
// merge loop (pair ranks by concatenation for tiktoken, by merges-list position for tokenizer.json), the
// piece cache, decoding and the fingerprint. The split patterns are in split_pattern.cpp, the loaders in
// tiktoken_file.cpp and tokenizer_json.cpp.
#include "engine/bpe_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <sstream>

#include "engine/bpe_internal.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/sha256.h"
#include "engine/unicode_data.h"

namespace crl {

using bpe_internal::kMetaspace;

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
  const uint32_t n = static_cast<uint32_t>(piece.size());
  TokenId on_stack[48];
  std::vector<TokenId> on_heap;
  TokenId* initial = on_stack;
  if (n > 48) {
    on_heap.resize(n);
    initial = on_heap.data();
  }
  for (uint32_t k = 0; k < n; ++k) initial[k] = byte_ids_[bytes[k]];
  merge_parts(piece, initial, n, out);
}

void BpeTokenizer::merge_parts(std::string_view piece, const TokenId* initial, uint32_t n,
                               std::vector<TokenId>& out) const {
  constexpr uint32_t kNone = UINT32_MAX;
  if (n <= 48) {
    // Linear scan (tiktoken's algorithm): parts are [start[k], start[k+1]); rank[k] merges parts k and k+1.
    uint32_t start[50];
    TokenId ids[50];
    uint32_t rank[50];
    TokenId merged[50];
    uint32_t count = n;
    for (uint32_t k = 0; k <= n; ++k) start[k] = k;
    for (uint32_t k = 0; k < n; ++k) ids[k] = initial[k];
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
    ids[k] = initial[k];
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

// Hugging Face's BPE with byte_fallback over the whole run, merged word by word: a word is a run of spaces
// and what follows them up to the next space that follows another character. No token of the vocabulary
// spans such a boundary unless the character before the space is one of bridges_ (a character followed by
// "\u2581" inside a token: Gemma's ">\u2581</"), so no merge of the whole run joins two words elsewhere, and
// merging each word alone gives the same ids; repeated words then hit the piece cache. A character without
// a token is its <0xNN> tokens, which end with '>'.
void BpeTokenizer::encode_metaspace(std::string_view text, std::vector<TokenId>& out) const {
  const auto bridge = [&](char32_t c) { return std::binary_search(bridges_.begin(), bridges_.end(), c); };
  // Whether the character text[at, at + n) ends a symbol that a token carries on over a following space.
  const auto bridges_on = [&](size_t at, size_t n, char32_t cp) {
    if (bridge(cp)) return true;
    const bool byte_tokens = cp == unicode::kInvalid || table_->find(text.data() + at, n) < 0;
    return byte_tokens && bridge(U'>');  // (looked up only before a space)
  };
  size_t word = 0, previous = 0, previous_n = 0;
  char32_t previous_cp = 0;
  bool after_space = true;  // (no boundary before the first character)
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    const size_t n = unicode::decode_utf8(text, i, &cp);
    const bool space = cp == ' ' || text.substr(i, n) == kMetaspace;
    if (space && !after_space && !bridges_on(previous, previous_n, previous_cp)) {
      encode_word(text.substr(word, i - word), out);
      word = i;
    }
    after_space = space;
    previous = i;
    previous_n = n;
    previous_cp = cp;
    i += n;
  }
  encode_word(text.substr(word), out);
}

// One word: spaces become "\u2581", each character starts as its token or, when the vocabulary has none (or
// the bytes are not UTF-8), as its bytes' <0xNN> tokens; then the merge loop.
void BpeTokenizer::encode_word(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  const bool cached = text.size() <= PieceCache::kMaxPieceBytes;
  if (cached && cache_->find(text, out)) return;
  const size_t before = out.size();
  std::vector<TokenId> parts;
  parts.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    const size_t n = text[i] == ' ' ? 1 : unicode::decode_utf8(text, i, &cp);
    const TokenId id = text[i] == ' '            ? table_->find(kMetaspace.data(), kMetaspace.size())
                       : cp == unicode::kInvalid ? -1
                                                 : table_->find(text.data() + i, n);
    if (id >= 0) {
      parts.push_back(id);
    } else {
      for (size_t k = 0; k < n; ++k) parts.push_back(byte_ids_[static_cast<unsigned char>(text[i + k])]);
    }
    i += n;
  }
  merge_parts({}, parts.data(), static_cast<uint32_t>(parts.size()), out);
  if (cached) cache_->insert(text, std::span<const TokenId>(out).subspan(before));
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<TokenId>& out) const {
  if (plain_->empty()) return encode_run(text, out);
  encode_around(*plain_, text, out);
}

void BpeTokenizer::encode_around(const AddedIndex& index, std::string_view text,
                                 std::vector<TokenId>& out) const {
  size_t chunk = 0;
  for (size_t i = 0; i < text.size();) {
    const SpecialToken* found = added_at(index, text, i);
    if (found == nullptr) {
      ++i;
      continue;
    }
    encode_run(text.substr(chunk, i - chunk), out);
    out.push_back(found->id);
    i += found->text.size();
    chunk = i;
  }
  encode_run(text.substr(chunk), out);
}

void BpeTokenizer::encode_run(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  if (metaspace_) return encode_metaspace(text, out);
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

const SpecialToken* BpeTokenizer::added_at(const AddedIndex& index, std::string_view text, size_t i) const {
  const int k = index.longest_at(text, i);
  return k < 0 ? nullptr : &specials_[static_cast<size_t>(k)];
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
  encode_around(*added_, text, ids);
  return ids;
}

std::string BpeTokenizer::decode(std::span<const TokenId> ids) const {
  std::string text;
  for (TokenId id : ids) {
    if (id >= 0 && static_cast<size_t>(id) < vocab_.size() && !vocab_[id].empty()) {
      text += decoded_.empty() ? vocab_[id] : decoded_[id];
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
  bridges_.clear();
  if (metaspace_) {
    for (const std::string& token : vocab_) {  // (the model's tokens: added ones are set below)
      char32_t previous = 0;
      for (size_t i = 0; i < token.size();) {
        char32_t cp;
        i += unicode::decode_utf8(token, i, &cp);
        if (cp == 0x2581 && previous != 0 && previous != 0x2581) bridges_.push_back(previous);
        previous = cp;
      }
    }
    std::sort(bridges_.begin(), bridges_.end());
    bridges_.erase(std::unique(bridges_.begin(), bridges_.end()), bridges_.end());
  }
  for (const SpecialToken& s : specials_) vocab_[s.id] = s.text;  // after the table: specials are not BPE
  added_ = std::make_shared<AddedIndex>();
  plain_ = std::make_shared<AddedIndex>();
  for (size_t k = 0; k < specials_.size(); ++k) {
    added_->add(specials_[k].text, static_cast<int>(k));
    if (!specials_[k].special) plain_->add(specials_[k].text, static_cast<int>(k));
  }
  added_->finish();
  plain_->finish();
  decoded_.clear();
  if (metaspace_) {
    // Hugging Face's decoders of these files: Replace("\u2581", " "), ByteFallback, Fuse (every token,
    // added ones too; a byte token is its byte, exactly, where ByteFallback writes U+FFFD for invalid UTF-8).
    decoded_.resize(vocab_.size());
    for (size_t id = 0; id < vocab_.size(); ++id) {
      const std::string& v = vocab_[id];
      const auto hex = [](char c) {
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                      : -1;
      };
      if (v.size() == 6 && v.starts_with("<0x") && v[5] == '>' && hex(v[3]) >= 0 && hex(v[4]) >= 0) {
        decoded_[id] = std::string(1, static_cast<char>(hex(v[3]) * 16 + hex(v[4])));
        continue;
      }
      for (size_t at = 0; at < v.size();) {
        if (v.compare(at, kMetaspace.size(), kMetaspace) == 0) {
          decoded_[id] += ' ';
          at += kMetaspace.size();
        } else {
          decoded_[id] += v[at++];
        }
      }
    }
  }
  Sha256 sha;
  sha.update("crl-bpe/v1|");
  sha.update(split_pattern_name(pattern_));
  sha.update(nfc_ ? "|nfc|" : "|none|");
  sha.update(tiktoken_ ? "ranks|" : (ignore_merges_ ? "merges-ignore|" : "merges|"));
  if (metaspace_) sha.update("metaspace-byte-fallback|");
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
    if (!s.special) sha.update("|plain");  // split out of content too: another mapping of text to ids
  }
  fingerprint_ = sha.hex_digest().substr(0, 16);
}

namespace bpe_internal {

std::string read_tokenizer_file(const std::string& path, const char* what) {
  return read_file(path, std::string("cannot open the ") + what + " (missing or unreadable)");
}

std::string path_parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::string file_stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = base.find('.');
  return dot == std::string::npos ? base : base.substr(0, dot);
}

}  // namespace bpe_internal

}  // namespace crl
