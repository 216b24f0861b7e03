// tiktoken rank files ("BASE64 RANK" lines) and the special tokens of OpenAI's encodings
// (engine/bpe_tokenizer.h from_ranks, load_tiktoken, tiktoken_encoding).
#include <string>
#include <string_view>
#include <vector>

#include "engine/bpe_internal.h"
#include "engine/bpe_tokenizer.h"
#include "engine/error.h"

namespace crl {

using bpe_internal::file_stem;
using bpe_internal::read_tokenizer_file;

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

}  // namespace

std::shared_ptr<const BpeTokenizer> BpeTokenizer::load_tiktoken(const std::string& path, SplitPattern pattern,
                                                                std::vector<SpecialToken> specials) {
  const std::string data = read_tokenizer_file(path, "tiktoken rank file");
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

}  // namespace crl
