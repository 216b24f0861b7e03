#pragma once
// Tokenizers: text <-> token ids. The context counts tokens in the policy's own tokenizer.
//
// Built-in default (until an LLM tokenizer is configured): ByteTokenizer. Each UTF-8 byte is one token
// (ids 0-255) and a few special tokens follow (ids 256+, see kByteSpecialTokens), so encoding is exact,
// reversible and needs no vocabulary file. Its fingerprint is the SHA-256 of its definition string.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/token.h"

namespace crl {

// A part of a rendered prompt. Template text (`special` true: the chat template's own strings) may hold
// special-token strings, which become special ids; content (an observation, an action, a prompt from a
// config or a client) is always ordinary text, so that text from an environment can never forge a turn
// ("<|im_end|>\n<|im_start|>system\n..." in a command's output stays plain text).
struct TextPiece {
  std::string_view text;
  bool special = false;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Encodes text. Special-token strings (e.g. "<|im_start|>") in the text become their special ids.
  virtual std::vector<TokenId> encode(std::string_view text) const = 0;
  // Encodes text with no special-token handling: special-token strings are tokenized as ordinary text.
  virtual std::vector<TokenId> encode_ordinary(std::string_view text) const = 0;
  // Encodes the pieces as one text in which only the `special` pieces' special-token strings are special
  // ids. Ordinary text runs across piece borders (BPE merges as in the concatenation), so when the content
  // holds no special-token string the ids equal encode() of the concatenated text.
  virtual std::vector<TokenId> encode_pieces(std::span<const TextPiece> pieces) const = 0;
  // Decodes ids to text; special ids decode to their strings. Never used to re-encode sampled tokens.
  virtual std::string decode(std::span<const TokenId> ids) const = 0;
  virtual int vocab_size() const = 0;
  virtual std::string name() const = 0;
  // Changes whenever the mapping between text and ids changes (vocabulary, merges, special tokens).
  virtual std::string fingerprint() const = 0;
  virtual std::optional<TokenId> special_token(std::string_view text) const = 0;
};

inline constexpr std::string_view kByteSpecialTokens[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<TokenId> encode(std::string_view text) const override;
  std::vector<TokenId> encode_ordinary(std::string_view text) const override;
  std::vector<TokenId> encode_pieces(std::span<const TextPiece> pieces) const override;
  std::string decode(std::span<const TokenId> ids) const override;
  int vocab_size() const override { return 256 + static_cast<int>(std::size(kByteSpecialTokens)); }
  std::string name() const override { return "byte"; }
  std::string fingerprint() const override;
  std::optional<TokenId> special_token(std::string_view text) const override;
};

// Builds a tokenizer from a spec (the value of `--tokenizer`):
//   "byte"                      the built-in ByteTokenizer;
//   PATH ending in ".json"      a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Qwen2, ...);
//   PATH ending in ".tiktoken"  a tiktoken rank file; the split pattern and special tokens are chosen by the
//                               file name ("cl100k_base", "o200k_base", "r50k_base", ...) or given as
//                               "PATH#PATTERN" with PATTERN one of cl100k, o200k, gpt2, qwen2, tekken.
// Throws crl::Error naming the file and field for a missing, unreadable or malformed file.
std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& spec);

}  // namespace crl
