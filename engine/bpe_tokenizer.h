#pragma once
// BPE tokenizers: OpenAI's tiktoken encodings (rank files) and Hugging Face tokenizer.json files, byte-level
// (the GPT-2 / Qwen2 / Llama 3 family: byte-level pre-tokenizer, merges, added tokens) or SentencePiece-style
// with byte fallback (Gemma: spaces written as U+2581 "▁", no pre-tokenizer split, characters missing from
// the vocabulary written as their bytes' <0xNN> tokens).
//
// Encoding, in order:
//  1. special and added tokens are split out of the text (longest match first) and become their ids;
//  2. the rest is normalized (NFC when the tokenizer.json asks for it);
//  3. the pre-tokenizer splits it into pieces with the encoding's split pattern (SplitPattern), implemented
//     by hand with the Unicode tables of engine/unicode_data.h, with the leftmost-first semantics of the
//     regex it stands for;
//  4. each piece's UTF-8 bytes are merged pairwise, lowest rank first (leftmost on ties), until no adjacent
//     pair has a rank. tiktoken ranks a pair by the rank of the concatenated bytes; tokenizer.json ranks it
//     by its position in `merges`. Long pieces use a heap (O(n log n)), short ones a linear scan.
// SentencePiece-style (metaspace) tokenizers replace steps 3 and 4: each space becomes "▁", the text between
// added tokens is one piece, and its parts start as characters (a character's token, else one <0xNN> token
// per byte) before the same merge loop; Hugging Face's BPE with byte_fallback does exactly this. (The piece
// is merged word by word where no token spans the words' boundary, which gives the same ids and lets the
// cache work: encode_metaspace.)
// Added tokens that are not special (tokenizer.json's "special": false: Gemma's "\n\n" and "<table>",
// Qwen3's "<think>" and "<tool_call>") are split out of ordinary text too, as Hugging Face tokenizers and so
// vLLM and SGLang do: only special tokens are kept out of content (encode_ordinary, encode_pieces).
// Invalid UTF-8 is tokenized as raw bytes (byte-level) or byte tokens (metaspace), so decode(encode(x)) == x
// for every byte string x (but for a literal "▁", which a metaspace tokenizer reads as a space, as Hugging
// Face does).
// Instances are immutable after construction (but for a thread-safe cache of merged pieces): encode and
// decode are safe to call from many threads.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/tokenizer.h"

namespace crl {

// The pre-tokenizer split patterns we implement (the regex each stands for is in split_pattern.cpp).
// kWords is ours, for tokenizers trained here (`crl tokenize --train --pattern words`): letter runs, digit
// runs, other symbol runs and whitespace runs are separate pieces, so a word or a number never carries the
// space or the '=' before it and is the same token wherever it stands (`UPDATE region=cobalt` and
// `submit cobalt` share the token of "cobalt"): a small model then copies a value by repeating a token,
// where the GPT-2 pattern makes it rewrite "=c o b al t" as " co b al t".
// kDeepSeekV3 is a sequence of three splits (DeepSeek-V3, R1 and V3.1's tokenizer.json): digit groups of up
// to three, runs of CJK ideographs and kana, then a GPT-4-like regex with \p{P} and \p{S}.
enum class SplitPattern { kGpt2, kCl100k, kO200k, kQwen2, kTekken, kWords, kDeepSeekV3 };

// "gpt2" | "cl100k" | "o200k" | "qwen2" | "tekken" | "words" | "deepseek_v3"; nullopt for another name.
std::optional<SplitPattern> split_pattern_from_name(std::string_view name);
std::string_view split_pattern_name(SplitPattern pattern);
// The regex source of the pattern (as tiktoken / tokenizer.json spell it).
std::string_view split_pattern_regex(SplitPattern pattern);
// The regexes of DeepSeek-V3's three Split pre-tokenizers, in order (as its tokenizer.json spells them).
std::array<std::string_view, 3> deepseek_split_regexes();
// Recognizes a regex source from a tokenizer.json; nullopt if it is not one we implement.
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex);
// Splits text (no special tokens) into pre-tokenizer pieces; returns each piece's end offset in bytes.
std::vector<size_t> pre_tokenize(SplitPattern pattern, std::string_view text);

struct SpecialToken {
  std::string text;
  TokenId id = 0;
  // false: an added token that is ordinary text's too (split out of content; tokenizer.json "special":
  // false).
  bool special = true;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // tiktoken: `ranks` maps byte strings to ranks (rank == token id).
  static std::shared_ptr<const BpeTokenizer> from_ranks(std::string name,
                                                        std::vector<std::string> tokens_by_rank,
                                                        SplitPattern pattern,
                                                        std::vector<SpecialToken> specials);
  // Reads a tiktoken rank file (lines "BASE64 RANK"). Throws crl::Error naming the file, line and field.
  static std::shared_ptr<const BpeTokenizer> load_tiktoken(const std::string& path, SplitPattern pattern,
                                                           std::vector<SpecialToken> specials);
  // Reads a Hugging Face tokenizer.json with a BPE model, byte-level or metaspace with byte fallback (see
  // above). Throws crl::Error naming the file and the JSON field for anything missing, malformed or
  // unsupported.
  static std::shared_ptr<const BpeTokenizer> load_hf_json(const std::string& path);
  // The same from the file's text; `path` names it in errors and gives the tokenizer its name.
  static std::shared_ptr<const BpeTokenizer> parse_hf_json(std::string_view data, const std::string& path);

  std::vector<TokenId> encode(std::string_view text) const override;
  // Encodes text with no special-token handling: special-token strings are tokenized as ordinary text.
  std::vector<TokenId> encode_ordinary(std::string_view text) const override;
  std::vector<TokenId> encode_pieces(std::span<const TextPiece> pieces) const override;
  std::string decode(std::span<const TokenId> ids) const override;
  int vocab_size() const override { return vocab_size_; }
  std::string name() const override { return name_; }
  std::string fingerprint() const override { return fingerprint_; }
  std::optional<TokenId> special_token(std::string_view text) const override;

  // Empties the cache of merged pieces (benchmarks of first encounters); results never depend on it.
  void clear_cache() const;

  SplitPattern pattern() const { return pattern_; }
  bool nfc() const { return nfc_; }
  bool metaspace() const { return metaspace_; }
  const std::vector<SpecialToken>& specials() const { return specials_; }

 private:
  BpeTokenizer() = default;
  BpeTokenizer(const BpeTokenizer&) = delete;  // (its indexes point into its own tables)
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;
  class ByteTable;   // byte string -> id, open addressing
  class PairTable;   // (left id, right id) -> (rank, merged id), open addressing
  class PieceCache;  // piece -> ids, thread-safe
  // Ordinary text: its non-special added tokens split out, the rest encoded by encode_run.
  void encode_text(std::string_view text, std::vector<TokenId>& out) const;
  class AddedIndex;  // added tokens by first byte and length (bpe_internal.h)
  // The added tokens of `index` (leftmost, longest first) as their ids, the text between them by encode_run.
  void encode_around(const AddedIndex& index, std::string_view text, std::vector<TokenId>& out) const;
  void encode_run(std::string_view text, std::vector<TokenId>& out) const;  // normalized, split, merged
  void encode_metaspace(std::string_view text, std::vector<TokenId>& out) const;
  void encode_word(std::string_view text, std::vector<TokenId>& out) const;  // (metaspace, cached)
  // The longest added token of `index` (all, or those not special) that starts at text[i], or nullptr.
  const SpecialToken* added_at(const AddedIndex& index, std::string_view text, size_t i) const;
  const SpecialToken* special_at(std::string_view text, size_t i) const { return added_at(*added_, text, i); }
  void encode_piece(std::string_view piece, std::vector<TokenId>& out) const;
  void merge_piece(std::string_view piece, std::vector<TokenId>& out) const;  // the BPE merge, no cache
  // The merge loop over `n` parts whose ids start as `initial` (a byte-level piece: its bytes; tiktoken
  // needs piece.size() == n to rank by the concatenated bytes).
  void merge_parts(std::string_view piece, const TokenId* initial, uint32_t n,
                   std::vector<TokenId>& out) const;
  // The rank and id of merging adjacent parts [a, m) and [m, b) of a piece; nullopt if they do not merge.
  std::optional<std::pair<uint32_t, TokenId>> merge_rank(std::string_view piece, uint32_t a, uint32_t m,
                                                         uint32_t b, TokenId left, TokenId right) const;
  void finish();

  std::string name_;
  SplitPattern pattern_ = SplitPattern::kCl100k;
  bool nfc_ = false;
  bool tiktoken_ = true;        // ranks by concatenation (tiktoken) or by the merges list (tokenizer.json)
  bool ignore_merges_ = false;  // tokenizer.json: a piece that is itself in the vocabulary is one token
  bool metaspace_ = false;      // SentencePiece-style: spaces are "▁", one piece, byte fallback
  std::vector<std::string> vocab_;  // id -> bytes ("" for ids without bytes)
  std::shared_ptr<ByteTable> table_;
  std::shared_ptr<PieceCache> cache_;
  std::vector<TokenId>
      pair_ids_;  // two-byte strings -> id or -1 (the most frequent lookup of tiktoken merging)
  std::shared_ptr<PairTable> merges_;
  std::vector<std::pair<TokenId, TokenId>> merge_list_;  // in rank order, for the fingerprint
  TokenId byte_ids_[256] = {};        // byte-level: the byte's token; metaspace: its <0xNN> fallback token
  std::vector<std::string> decoded_;  // metaspace: id -> text ("▁" a space, <0xNN> its byte); else empty
  // metaspace: the characters some token holds right before a "▁" (sorted): no word boundary after them.
  std::vector<char32_t> bridges_;
  std::vector<SpecialToken> specials_;  // sorted by id; every added token, special or not
  std::shared_ptr<AddedIndex> added_;   // every added token (specials_), by first byte and length
  std::shared_ptr<AddedIndex> plain_;   // those not special
  int vocab_size_ = 0;
  std::string fingerprint_;
};

// The special tokens of OpenAI's encodings as tiktoken defines them, plus the ChatML tokens of cl100k
// (<|im_start|> 100264, <|im_end|> 100265, <|im_sep|> 100266, as gpt-tokenizer defines them).
// `encoding`: "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base".
std::optional<std::pair<SplitPattern, std::vector<SpecialToken>>> tiktoken_encoding(
    std::string_view encoding);

}  // namespace crl
