// Byte-level BPE training and the tokenizer.json writer (engine/bpe_trainer.h).
#include "engine/bpe_trainer.h"

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <unordered_map>

#include "engine/bpe_tokenizer.h"
#include "engine/error.h"
#include "engine/unicode_data.h"

namespace crl {
namespace {

uint64_t pair_key(int left, int right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// One distinct pre-tokenizer piece: its current symbols and how often it occurs.
struct Word {
  std::vector<int> symbols;
  int64_t count = 0;
};

// Heap entry: highest count first, then the smaller pair key (the documented tie rule).
struct Candidate {
  int64_t count;
  uint64_t key;
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : key > o.key; }
};

// Splits a document around the special-token strings (longest match first at each position) and appends the
// pre-tokenizer pieces of the ordinary text to `counts`.
void count_pieces(std::string_view text, const std::vector<std::string>& specials, SplitPattern pattern,
                  std::map<std::string, int64_t>& counts, int64_t& pieces) {
  auto flush = [&](std::string_view part) {
    size_t begin = 0;
    for (size_t end : pre_tokenize(pattern, part)) {
      if (end > begin) {
        ++counts[std::string(part.substr(begin, end - begin))];
        ++pieces;
      }
      begin = end;
    }
  };
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    size_t best = 0;
    for (const std::string& s : specials) {
      if (s.size() > best && text.compare(i, s.size(), s) == 0) best = s.size();
    }
    if (best == 0) {
      ++i;
      continue;
    }
    flush(text.substr(start, i - start));
    i += best;
    start = i;
  }
  flush(text.substr(start));
}

// GPT-2's byte -> printable character map (the alphabet of byte-level vocabularies; the loader in
// tokenizer_json.cpp has the inverse).
std::string byte_level_spelling(std::string_view bytes) {
  static const auto table = [] {
    std::array<char32_t, 256> to_char{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return to_char;
  }();
  std::string out;
  for (unsigned char b : bytes) unicode::append_utf8(out, table[b]);
  return out;
}

}  // namespace

BpeModel train_bpe(std::span<const std::string> documents, const BpeTrainOptions& options) {
  const int specials = static_cast<int>(options.special_tokens.size());
  if (options.vocab_size < 256 + specials) {
    throw Error("--vocab", "vocab",
                "vocab " + std::to_string(options.vocab_size) + " is below 256 bytes + " +
                    std::to_string(specials) + " special tokens (expected at least " +
                    std::to_string(256 + specials) + ")");
  }
  if (options.min_frequency < 1) {
    throw Error("--min-frequency", "min_frequency",
                "expected >= 1, got " + std::to_string(options.min_frequency));
  }
  std::set<std::string> seen;
  for (const std::string& s : options.special_tokens) {
    if (s.empty()) throw Error("--special", "special", "empty special token");
    if (!seen.insert(s).second) throw Error("--special", "special", "duplicate special token " + quote(s));
  }

  BpeModel model;
  model.pattern = options.pattern;
  std::map<std::string, int64_t> counts;  // ordered: word indexes do not depend on hashing
  for (const std::string& doc : documents) {
    count_pieces(doc, options.special_tokens, options.pattern, counts, model.pieces);
  }
  model.distinct_pieces = static_cast<int64_t>(counts.size());

  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [piece, count] : counts) {
    Word w;
    w.count = count;
    for (unsigned char b : piece) w.symbols.push_back(b);
    words.push_back(std::move(w));
  }
  model.vocab.resize(256);
  std::unordered_map<std::string, int> ids;
  for (int b = 0; b < 256; ++b) {
    model.vocab[b] = std::string(1, static_cast<char>(b));
    ids.emplace(model.vocab[b], b);
  }

  // Pair counts and, per pair, the words that may hold it (may list a word twice or stale: deduplicated
  // and rechecked when used).
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int>> where;
  for (int w = 0; w < static_cast<int>(words.size()); ++w) {
    const auto& s = words[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t key = pair_key(s[i], s[i + 1]);
      pair_count[key] += words[w].count;
      where[key].push_back(w);
    }
  }
  std::priority_queue<Candidate> heap;
  {
    std::vector<Candidate> all;
    all.reserve(pair_count.size());
    for (const auto& [key, count] : pair_count) all.push_back({count, key});
    std::sort(all.begin(), all.end());  // the heap's content must not depend on hash order either
    for (const Candidate& c : all) heap.push(c);
  }

  const int target = options.vocab_size - specials;
  while (static_cast<int>(model.vocab.size()) < target && !heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const auto it = pair_count.find(top.key);
    const int64_t current = it == pair_count.end() ? 0 : it->second;
    if (current != top.count) {  // stale entry: requeue with the current count
      if (current > 0) heap.push({current, top.key});
      continue;
    }
    if (current < options.min_frequency) break;
    const int left = static_cast<int>(top.key >> 32), right = static_cast<int>(top.key & 0xffffffffu);
    const std::string bytes = model.vocab[left] + model.vocab[right];
    int merged;
    if (const auto found = ids.find(bytes); found != ids.end()) {
      merged = found->second;
    } else {
      merged = static_cast<int>(model.vocab.size());
      model.vocab.push_back(bytes);
      ids.emplace(bytes, merged);
    }
    model.merges.emplace_back(left, right);

    std::vector<int> holders = std::move(where[top.key]);
    where.erase(top.key);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    std::set<uint64_t> touched;  // ordered, so the heap receives its entries in a fixed order
    for (int w : holders) {
      Word& word = words[w];
      auto& s = word.symbols;
      bool has = false;
      for (size_t i = 0; i + 1 < s.size() && !has; ++i) has = s[i] == left && s[i + 1] == right;
      if (!has) continue;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t key = pair_key(s[i], s[i + 1]);
        pair_count[key] -= word.count;
        touched.insert(key);
      }
      std::vector<int> next;
      next.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          next.push_back(merged);
          i += 2;
        } else {
          next.push_back(s[i++]);
        }
      }
      s = std::move(next);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t key = pair_key(s[i], s[i + 1]);
        pair_count[key] += word.count;
        touched.insert(key);
        where[key].push_back(w);
      }
    }
    for (uint64_t key : touched) {
      const int64_t count = pair_count[key];
      if (count <= 0) {
        pair_count.erase(key);
      } else {
        heap.push({count, key});
      }
    }
  }
  model.special_tokens = options.special_tokens;
  for (const std::string& s : options.special_tokens) model.vocab.push_back(s);
  return model;
}

std::string bpe_tokenizer_json(const BpeModel& model) {
  using Json = nlohmann::ordered_json;
  const size_t first_special = model.vocab.size() - model.special_tokens.size();
  Json vocab = Json::object();
  for (size_t id = 0; id < model.vocab.size(); ++id) {
    // Special tokens are spelled as themselves (HF's trainer does the same); the loader splits them out
    // through added_tokens before it reads model.vocab for them.
    // A special token spelled like a learned token is left out of model.vocab (its id stays in added_tokens).
    const std::string key = id < first_special ? byte_level_spelling(model.vocab[id]) : model.vocab[id];
    if (!vocab.contains(key)) vocab[key] = id;
  }
  Json merges = Json::array();
  for (const auto& [l, r] : model.merges) {
    merges.push_back(byte_level_spelling(model.vocab[l]) + " " + byte_level_spelling(model.vocab[r]));
  }
  Json added = Json::array();
  for (size_t k = 0; k < model.special_tokens.size(); ++k) {
    added.push_back(Json{{"id", first_special + k},
                         {"content", model.special_tokens[k]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", true}});
  }
  const Json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  Json root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = added;
  root["normalizer"] = nullptr;
  if (model.pattern == SplitPattern::kGpt2) {
    root["pre_tokenizer"] = byte_level;  // ByteLevel's built-in regex is the GPT-2 pattern
  } else {
    Json split = {{"type", "Split"},
                  {"pattern", Json{{"Regex", std::string(split_pattern_regex(model.pattern))}}},
                  {"behavior", "Isolated"},
                  {"invert", false}};
    Json bytes_only = byte_level;
    bytes_only["use_regex"] = false;
    root["pre_tokenizer"] = Json{{"type", "Sequence"}, {"pretokenizers", Json::array({split, bytes_only})}};
  }
  root["post_processor"] = nullptr;
  root["decoder"] = byte_level;
  root["model"] = Json{{"type", "BPE"},
                       {"dropout", nullptr},
                       {"unk_token", nullptr},
                       {"continuing_subword_prefix", nullptr},
                       {"end_of_word_suffix", nullptr},
                       {"fuse_unk", false},
                       {"byte_fallback", false},
                       {"ignore_merges", false},
                       {"vocab", vocab},
                       {"merges", merges}};
  return root.dump(1, ' ', false) + "\n";
}

}  // namespace crl
