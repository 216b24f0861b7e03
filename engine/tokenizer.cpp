#include "engine/tokenizer.h"

#include "engine/bpe_tokenizer.h"
#include "engine/error.h"
#include "engine/sha256.h"

namespace crl {

std::optional<TokenId> ByteTokenizer::special_token(std::string_view text) const {
  for (size_t i = 0; i < std::size(kByteSpecialTokens); ++i) {
    if (kByteSpecialTokens[i] == text) return static_cast<TokenId>(256 + i);
  }
  return std::nullopt;
}

std::vector<TokenId> ByteTokenizer::encode(std::string_view text) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    bool matched = false;
    if (text[i] == '<') {
      for (size_t s = 0; s < std::size(kByteSpecialTokens); ++s) {
        if (text.substr(i).starts_with(kByteSpecialTokens[s])) {
          ids.push_back(static_cast<TokenId>(256 + s));
          i += kByteSpecialTokens[s].size();
          matched = true;
          break;
        }
      }
    }
    if (!matched) ids.push_back(static_cast<unsigned char>(text[i++]));
  }
  return ids;
}

std::vector<TokenId> ByteTokenizer::encode_ordinary(std::string_view text) const {
  std::vector<TokenId> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::vector<TokenId> ByteTokenizer::encode_pieces(std::span<const TextPiece> pieces) const {
  std::vector<TokenId> ids;
  for (const TextPiece& piece : pieces) {  // bytes do not merge: each piece encodes alone
    const std::vector<TokenId> part = piece.special ? encode(piece.text) : encode_ordinary(piece.text);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::string ByteTokenizer::decode(std::span<const TokenId> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (TokenId id : ids) {
    if (id >= 0 && id < 256) {
      text += static_cast<char>(id);
    } else if (id >= 256 && id < vocab_size()) {
      text += kByteSpecialTokens[id - 256];
    } else {
      text += "<|unk:" + std::to_string(id) + "|>";
    }
  }
  return text;
}

std::string ByteTokenizer::fingerprint() const {
  std::string definition = "byte-tokenizer/v1";
  for (std::string_view s : kByteSpecialTokens) definition += "|" + std::string(s);
  return sha256_hex(definition).substr(0, 16);
}

std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_shared<ByteTokenizer>();
  if (spec.empty()) throw Error("--tokenizer", "spec", "empty; expected \"byte\" or a file path");
  if (spec.ends_with(".json")) return BpeTokenizer::load_hf_json(spec);
  std::string path = spec, pattern_name;
  if (const size_t hash = spec.rfind('#');
      hash != std::string::npos && spec.substr(0, hash).ends_with(".tiktoken")) {
    path = spec.substr(0, hash);
    pattern_name = spec.substr(hash + 1);
  }
  if (!path.ends_with(".tiktoken")) {
    throw Error(
        spec, "--tokenizer",
        "expected \"byte\", a tokenizer.json file (*.json) or a tiktoken rank file (*.tiktoken[#PATTERN])");
  }
  const size_t slash = path.find_last_of('/');
  std::string stem = slash == std::string::npos ? path : path.substr(slash + 1);
  stem = stem.substr(0, stem.size() - std::string_view(".tiktoken").size());
  auto encoding = tiktoken_encoding(stem);
  if (!pattern_name.empty()) {
    const auto pattern = split_pattern_from_name(pattern_name);
    if (!pattern) {
      throw Error(
          spec, "pattern",
          "unknown split pattern " + quote(pattern_name) + " (expected gpt2, cl100k, o200k or qwen2)");
    }
    if (!encoding) encoding.emplace(*pattern, std::vector<SpecialToken>{});
    encoding->first = *pattern;
  }
  if (!encoding) {
    throw Error(
        spec, "pattern",
        "the file name is not a known encoding (r50k_base, p50k_base, p50k_edit, cl100k_base, o200k_base); "
        "name the split pattern as PATH#gpt2, PATH#cl100k, PATH#o200k or PATH#qwen2");
  }
  return BpeTokenizer::load_tiktoken(path, encoding->first, std::move(encoding->second));
}

}  // namespace crl
