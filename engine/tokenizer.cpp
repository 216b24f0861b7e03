#include "engine/tokenizer.h"

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
  if (spec == "byte" || spec.empty()) return std::make_shared<ByteTokenizer>();
  throw Error("--tokenizer", "spec", "unknown tokenizer " + quote(spec) + "; expected \"byte\" or a file path");
}

}  // namespace crl
