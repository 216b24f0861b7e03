// Hugging Face tokenizer.json files with a BPE model (engine/bpe_tokenizer.h load_hf_json), byte-level or
// SentencePiece-style with byte fallback (Gemma's): normalizer, pre-tokenizer, decoder, vocabulary, merges
// and added tokens, each checked and named in errors.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/bpe_internal.h"
#include "engine/bpe_tokenizer.h"
#include "engine/error.h"
#include "engine/json_reader.h"
#include "engine/json_view.h"
#include "engine/unicode_data.h"

namespace crl {

using bpe_internal::file_stem;
using bpe_internal::kMetaspace;
using bpe_internal::path_parent;
using bpe_internal::read_tokenizer_file;

// ---------------------------------------------------------------------------------------------------------
// tokenizer.json
// ---------------------------------------------------------------------------------------------------------

namespace {

// GPT-2's byte <-> printable character map (bytes_to_unicode in the GPT-2 sources): printable Latin-1
// bytes map to themselves, the others to U+0100 onwards in byte order.
struct ByteLevelAlphabet {
  static constexpr char32_t kChars = 512;  // every character of the alphabet is below U+0200
  char32_t to_char[256];
  int16_t to_byte[kChars];  // -1: not a character of the alphabet
  ByteLevelAlphabet() {
    std::fill(std::begin(to_byte), std::end(to_byte), int16_t{-1});
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
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
    const int byte = cp < ByteLevelAlphabet::kChars ? byte_level().to_byte[cp] : -1;
    if (byte < 0) return std::nullopt;
    out += static_cast<char>(byte);
  }
  return out;
}

using Json = nlohmann::json;

const Json& member(const Json& object, const char* key, const std::string& path, const std::string& field) {
  if (!object.is_object() || !object.contains(key)) throw Error(path, field + "." + key, "missing");
  return object.at(key);
}

// The member `key` of an object as text; "" when it is absent or not a string (a form matched against it then
// does not match: nlohmann's value() would throw its own type_error, which names no file).
std::string text_of(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// A vocabulary entry's bytes as a JSON string for an error message (invalid UTF-8 shown as U+FFFD: a byte
// token alone is not UTF-8).
std::string as_json(const std::string& bytes) {
  return Json(bytes).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// True when the member `key` is the boolean true (absent, false or another type: false), for matching forms.
bool is_true(const Json& object, const char* key) {
  if (!object.is_object()) return false;
  const auto it = object.find(key);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

// A boolean member: `fallback` when absent or null; any other type is refused, naming the field.
bool flag(const Json& object, const char* key, bool fallback, const std::string& path,
          const std::string& field) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    throw Error(path, field + "." + key, std::string("expected true or false, found a ") + it->type_name());
  return it->get<bool>();
}

// A token id: an integer in [0, limit), else an error naming the field. The ids of a tokenizer.json are
// dense (the vocabulary's, then the added tokens'), and the tables are sized by the largest: an id far beyond
// the file's entries would size them for ids that hold nothing (2^31 of them: tens of GB). `id` is the
// value (INT64_MAX for an unsigned one above it), `shown` its text.
TokenId checked_id(int64_t id, std::string_view shown, int64_t limit, const std::string& path,
                   const std::string& field) {
  if (id < 0 || id >= limit) {
    throw Error(path, field,
                "id " + std::string(shown) + " is outside [0, " + std::to_string(limit) +
                    "): ids run from 0 through the file's entries (model.vocab and added_tokens), with at "
                    "most 2^20 unused");
  }
  return static_cast<TokenId>(id);
}

TokenId token_id(const Json& value, int64_t limit, const std::string& path, const std::string& field) {
  if (!value.is_number_integer())
    throw Error(path, field, std::string("expected an integer id, found a ") + value.type_name());
  const bool is_unsigned = value.is_number_unsigned();
  const int64_t id = is_unsigned && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                         ? INT64_MAX
                         : value.get<int64_t>();
  return checked_id(id, value.dump(), limit, path, field);
}

// The name nlohmann gives a value's type, so that both readers' messages read alike.
const char* type_name(const JsonView& value) {
  switch (value.type()) {
    case JsonType::kNull:
      return "null";
    case JsonType::kBool:
      return "boolean";
    case JsonType::kNumber:
      return "number";
    case JsonType::kString:
      return "string";
    case JsonType::kArray:
      return "array";
    case JsonType::kObject:
      return "object";
  }
  return "value";
}

// The same for a value of the flat document (a vocabulary entry's id); its text is shown as written (an
// integer's JSON text is its only spelling). `field()` names it, called only for an error (a vocabulary
// has hundreds of thousands of entries).
template <typename Field>
TokenId token_id(const JsonView& value, int64_t limit, const std::string& path, const Field& field) {
  if (!value.is_integer())
    throw Error(path, field(), std::string("expected an integer id, found a ") + type_name(value));
  const JsonNumber number = value.number_value();
  const int64_t id =
      number.kind == JsonNumberKind::kUnsigned && number.value.u > static_cast<uint64_t>(INT64_MAX)
          ? INT64_MAX
          : number.as_integer();
  if (id >= 0 && id < limit) return static_cast<TokenId>(id);
  return checked_id(id, value.raw(), limit, path, field());
}

// An object's members but `skip` and `skip_too`, as nlohmann's DOM (null when `value` is absent; anything
// but an object whole): the small parts of a tokenizer.json around its vocabulary and merges.
Json small_members(const JsonView& value, std::string_view skip, std::string_view skip_too) {
  if (!value.exists()) return Json();
  if (!value.is_object()) return value.to_json();
  Json members = Json::object();
  for (const JsonView member : value) {
    const std::string_view key = member.key();
    if (key != skip && key != skip_too) members[std::string(key)] = member.to_json();
  }
  return members;
}

std::string type_of(const Json& object) {
  return object.is_object() && object.contains("type") && object["type"].is_string()
             ? object["type"].get<std::string>()
             : "";
}

// {"String": text} (a Replace or Split pattern) holding `text`.
bool is_string_pattern(const Json& pattern, std::string_view text) {
  return pattern.is_object() && pattern.size() == 1 && pattern.contains("String") &&
         pattern["String"].is_string() && pattern["String"].get<std::string>() == text;
}

// Gemma's normalizer: Replace(" " -> "\u2581") and nothing else (no prepended "\u2581": Llama 2's form is not
// supported, its first-word rules differ between Hugging Face versions).
bool is_metaspace_normalizer(const Json& normalizer) {
  return type_of(normalizer) == "Replace" && is_string_pattern(normalizer.value("pattern", Json()), " ") &&
         text_of(normalizer, "content") == kMetaspace;
}

// The decoder that undoes it: Sequence[Replace("\u2581" -> " "), ByteFallback, Fuse].
bool is_metaspace_decoder(const Json& decoder) {
  if (type_of(decoder) != "Sequence" || !decoder.contains("decoders") || !decoder["decoders"].is_array())
    return false;
  const Json& list = decoder["decoders"];
  return list.size() == 3 && type_of(list[0]) == "Replace" &&
         is_string_pattern(list[0].value("pattern", Json()), kMetaspace) &&
         text_of(list[0], "content") == " " && type_of(list[1]) == "ByteFallback" &&
         type_of(list[2]) == "Fuse";
}

// DeepSeek-V3's [Split(digits), Split(CJK), Split(words), ByteLevel], each Split "Isolated", not inverted.
bool is_deepseek_sequence(const Json& list) {
  if (!list.is_array() || list.size() != 4 || type_of(list[3]) != "ByteLevel") return false;
  const auto regexes = deepseek_split_regexes();
  for (size_t k = 0; k < 3; ++k) {
    const Json& split = list[k];
    if (type_of(split) != "Split" || text_of(split, "behavior") != "Isolated" || is_true(split, "invert"))
      return false;
    const Json pattern = split.value("pattern", Json());
    if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string() ||
        pattern["Regex"].get<std::string>() != regexes[k])
      return false;
  }
  return true;
}

// added_tokens as text -> id (those with a string content and an integer id; the rest are checked later).
std::unordered_map<std::string, TokenId> added_token_ids(const Json& root) {
  std::unordered_map<std::string, TokenId> ids;
  if (!root.contains("added_tokens") || !root["added_tokens"].is_array()) return ids;
  for (const Json& a : root["added_tokens"]) {
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id") ||
        !a["id"].is_number_integer())
      continue;
    const Json& id = a["id"];  // (an id outside int32 matches nothing: it is refused with its token below)
    const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() <= INT32_MAX
                                                  : id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX;
    ids.emplace(a["content"].get<std::string>(), in_range ? static_cast<TokenId>(id.get<int64_t>()) : -1);
  }
  return ids;
}

void check_byte_level(const Json& node, const std::string& path, const std::string& field, bool use_regex) {
  if (flag(node, "add_prefix_space", false, path, field)) {
    throw Error(path, field + ".add_prefix_space", "true is not supported (expected false)");
  }
  if (flag(node, "use_regex", true, path, field) != use_regex) {
    throw Error(path, field + ".use_regex", std::string("expected ") + (use_regex ? "true" : "false"));
  }
}

}  // namespace

std::shared_ptr<const BpeTokenizer> BpeTokenizer::load_hf_json(const std::string& path) {
  return parse_hf_json(read_tokenizer_file(path, "tokenizer.json"), path);
}

std::shared_ptr<const BpeTokenizer> BpeTokenizer::parse_hf_json(std::string_view data,
                                                                const std::string& path) {
  // One pass into a flat document (engine/json_view.h: read_json's limits and errors: depth, duplicate keys,
  // so a vocabulary listing a token twice is refused rather than read as its last entry, syntax errors
  // naming the byte offset). The vocabulary and the merges (hundreds of thousands of entries) are read from
  // it as views; the rest, a few kilobytes, as nlohmann's DOM. (Read whole into nlohmann's DOM, Gemma 3's
  // 33 MB file took 2.4 s to load: bench/tokenizer_load_bench.cpp, bench/RESULTS.md.)
  const JsonDocument document = JsonDocument::parse_large(data, path);
  const JsonView top = document.root();
  if (!top.is_object()) throw Error(path, "", "expected a JSON object");
  const Json root = small_members(top, "model", {});
  const JsonView model_view = top.find("model");
  const Json model_members = small_members(model_view, "vocab", "merges");
  std::shared_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->tiktoken_ = false;
  {  // name: the model's folder (the one holding the file, or above a "models" folder), else the file's stem
    std::vector<std::string> parts;
    std::stringstream split(path_parent(path));
    for (std::string part; std::getline(split, part, '/');) {
      if (!part.empty() && part != ".") parts.push_back(part);
    }
    while (!parts.empty() && (parts.back() == "models" || parts.back() == "..")) parts.pop_back();
    t->name_ = "hf:" + (parts.empty() ? file_stem(path) : parts.back());
  }

  // normalizer: none or NFC (byte-level), or Replace(" " -> "\u2581") (metaspace).
  const Json& normalizer = root.contains("normalizer") ? root["normalizer"] : Json();
  if (!normalizer.is_null()) {
    const std::string type = type_of(normalizer);
    if (type == "NFC") {
      t->nfc_ = true;
    } else if (is_metaspace_normalizer(normalizer)) {
      t->metaspace_ = true;
    } else if (!(type == "Sequence" && normalizer.contains("normalizers") &&
                 normalizer["normalizers"].empty())) {
      throw Error(
          path, "normalizer.type",
          "unsupported normalizer " + quote(type) +
              " (supported: null, NFC, Replace(\" \" -> \"\u2581\") as Gemma's tokenizer.json has it)");
    }
  }

  // pre_tokenizer: ByteLevel with its built-in GPT-2 regex, or Sequence[Split(regex), ByteLevel(no regex)];
  // metaspace: none, or Gemma's Split(" "), which splits nothing once every space is "\u2581".
  const Json& pre =
      t->metaspace_ && !root.contains("pre_tokenizer") ? Json() : member(root, "pre_tokenizer", path, "");
  const std::string pre_type = type_of(pre);
  if (t->metaspace_) {
    if (!pre.is_null() && !(pre_type == "Split" && is_string_pattern(pre.value("pattern", Json()), " ") &&
                            !is_true(pre, "invert"))) {
      throw Error(path, "pre_tokenizer",
                  "expected null or Split(\" \") with the Replace(\" \" -> \"\u2581\") normalizer, found " +
                      quote(pre_type.empty() ? pre.dump() : pre_type));
    }
  } else if (pre_type == "ByteLevel") {
    check_byte_level(pre, path, "pre_tokenizer", true);
    t->pattern_ = SplitPattern::kGpt2;
  } else if (pre_type == "Sequence" &&
             is_deepseek_sequence(member(pre, "pretokenizers", path, "pre_tokenizer"))) {
    check_byte_level(pre["pretokenizers"][3], path, "pre_tokenizer.pretokenizers[3]", false);
    t->pattern_ = SplitPattern::kDeepSeekV3;
  } else if (pre_type == "Sequence") {
    const Json& list = member(pre, "pretokenizers", path, "pre_tokenizer");
    if (!list.is_array() || list.size() != 2 || type_of(list[0]) != "Split" ||
        type_of(list[1]) != "ByteLevel") {
      throw Error(path, "pre_tokenizer.pretokenizers",
                  "expected [Split, ByteLevel], or DeepSeek-V3's [Split, Split, Split, ByteLevel]");
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
                      " (supported: the GPT-2, cl100k, o200k, Qwen2, tekken and crl words patterns)");
    }
    if (text_of(split, "behavior") != "Isolated" || flag(split, "invert", false, path, field)) {
      throw Error(path, field + ".behavior", "expected \"Isolated\" with invert false");
    }
    check_byte_level(list[1], path, "pre_tokenizer.pretokenizers[1]", false);
    t->pattern_ = *p;
  } else {
    throw Error(path, "pre_tokenizer.type",
                "unsupported pre-tokenizer " + quote(pre_type) +
                    " (expected ByteLevel or Sequence[Split, ByteLevel])");
  }
  if (t->metaspace_) {
    if (!root.contains("decoder") || !is_metaspace_decoder(root["decoder"])) {
      throw Error(path, "decoder",
                  "expected Sequence[Replace(\"\u2581\" -> \" \"), ByteFallback, Fuse] with the metaspace "
                  "normalizer");
    }
  } else if (root.contains("decoder") && !root["decoder"].is_null() &&
             type_of(root["decoder"]) != "ByteLevel") {
    throw Error(path, "decoder.type", "expected \"ByteLevel\", found " + quote(type_of(root["decoder"])));
  }

  // model: BPE over the byte-level alphabet.
  if (!model_view.exists()) throw Error(path, "model", "missing");
  const Json& model = model_members;
  if (model.contains("type") && type_of(model) != "BPE") {
    throw Error(path, "model.type", "expected \"BPE\", found " + quote(type_of(model)));
  }
  const bool byte_fallback = model.contains("byte_fallback") && model["byte_fallback"].is_boolean() &&
                             model["byte_fallback"].get<bool>();
  if (byte_fallback != t->metaspace_) {
    throw Error(path, "model.byte_fallback",
                t->metaspace_ ? "expected true with the metaspace normalizer (characters missing from the "
                                "vocabulary would be <unk>, which is not supported)"
                              : "true is only supported with the metaspace normalizer (Gemma's form)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      throw Error(path, std::string("model.") + key, "must be empty for a byte-level BPE");
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      (!model["dropout"].is_number() || model["dropout"].get<double>() != 0.0)) {
    throw Error(path, "model.dropout", "dropout is not supported");
  }
  t->ignore_merges_ = flag(model, "ignore_merges", false, path, "model");
  if (t->ignore_merges_ && t->metaspace_)
    throw Error(path, "model.ignore_merges", "true is not supported with the metaspace normalizer");
  const JsonView vocab = model_view.find("vocab");
  if (!model_view.is_object() || !vocab.exists()) throw Error(path, "model.vocab", "missing");
  if (!vocab.is_object()) throw Error(path, "model.vocab", "expected an object {token: id}");
  const size_t added_count =
      root.contains("added_tokens") && root["added_tokens"].is_array() ? root["added_tokens"].size() : 0;
  const int64_t id_limit = static_cast<int64_t>(vocab.size() + added_count) + (int64_t{1} << 20);
  ByteTable ids(vocab.size());  // spelling (byte-level: its alphabet's; metaspace: the bytes) -> id
  std::optional<std::unordered_map<std::string, TokenId>> added;
  for (const JsonView value : vocab) {
    const std::string_view key = value.key();
    const auto field = [&] { return "model.vocab[" + quote(key) + "]"; };
    const TokenId id = token_id(value, id_limit, path, field);
    const auto bytes = t->metaspace_ ? std::optional<std::string>(key) : byte_level_decode(key);
    if (!bytes) {  // DeepSeek's vocabulary lists its added tokens in their own spelling: they are those
      if (!added) added = added_token_ids(root);  // (built once, on the first such entry)
      if (const auto it = added->find(std::string(key)); it != added->end() && it->second == id) continue;
    }
    if (!bytes || bytes->empty()) {
      throw Error(path, field(), "not a byte-level token (character outside the alphabet)");
    }
    if (static_cast<size_t>(id) >= t->vocab_.size()) t->vocab_.resize(static_cast<size_t>(id) + 1);
    if (!t->vocab_[id].empty()) throw Error(path, field(), "duplicate id " + std::to_string(id));
    t->vocab_[id] = std::move(*bytes);
    ids.insert(key, id);
  }
  for (int b = 0; b < 256; ++b) {
    std::string key;
    if (t->metaspace_) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      key = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";  // the byte-fallback token
    } else {
      unicode::append_utf8(key, byte_level().to_char[b]);
    }
    TokenId id = ids.find(key);
    // Gemma 1 has no <0x09>: a tab is its own token, so its byte never falls back (an ASCII byte is
    // always a whole character).
    if (id < 0 && t->metaspace_ && b < 0x80) id = ids.find(std::string(1, static_cast<char>(b)));
    if (id < 0)
      throw Error(path, "model.vocab", "no token for the byte " + std::to_string(b) + " (" + key + ")");
    t->byte_ids_[b] = id;
  }
  const JsonView merges = model_view.find("merges");
  if (!merges.exists()) throw Error(path, "model.merges", "missing");
  if (!merges.is_array()) throw Error(path, "model.merges", "expected an array");
  t->merge_list_.reserve(merges.size());
  auto pairs = std::make_shared<PairTable>(merges.size());
  std::string joined;  // left + right, reused
  size_t r = 0;
  for (const JsonView m : merges) {
    const auto field = [&] { return "model.merges[" + std::to_string(r) + "]"; };
    std::string_view left, right;
    if (m.is_string()) {
      const std::string_view s = m.string();
      const size_t space = s.find(' ');
      if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos) {
        throw Error(path, field(), "expected \"LEFT RIGHT\", found " + quote(s));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && (*m.begin()).is_string() && (*++m.begin()).is_string()) {
      left = (*m.begin()).string();
      right = (*++m.begin()).string();
    } else {
      throw Error(path, field(), "expected \"LEFT RIGHT\" or [LEFT, RIGHT]");
    }
    joined.assign(left).append(right);
    const TokenId a = ids.find(left), b = ids.find(right), c = ids.find(joined);
    if (a < 0 || b < 0 || c < 0) {
      throw Error(path, field(),
                  "a part or the merge of " + quote(left) + " + " + quote(right) + " is not in model.vocab");
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    pairs->insert(key, (static_cast<uint64_t>(r) << 32) | static_cast<uint32_t>(c));  // the first one wins
    t->merge_list_.emplace_back(a, b);
    ++r;
  }

  t->merges_ = std::move(pairs);

  // added_tokens: split out before normalization and pre-tokenization.
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const Json& added = root["added_tokens"];
    if (!added.is_array()) throw Error(path, "added_tokens", "expected an array");
    // Each id and each text once: an id listed with two texts decodes to one of them only, and a text
    // listed with two ids encodes to one of them only (a fuzzer's find; no model's file repeats either).
    std::unordered_map<TokenId, size_t> entry_of_id;
    std::unordered_map<std::string, size_t> entry_of_text;
    for (size_t k = 0; k < added.size(); ++k) {
      const std::string field = "added_tokens[" + std::to_string(k) + "]";
      const Json& a = added[k];
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string() || a["content"].get<std::string>().empty()) {
        throw Error(path, field, "expected {\"id\": N, \"content\": \"...\"}");
      }
      if (flag(a, "lstrip", false, path, field) || flag(a, "rstrip", false, path, field) ||
          flag(a, "single_word", false, path, field)) {
        throw Error(path, field, "lstrip, rstrip and single_word are not supported");
      }
      const TokenId id = token_id(a["id"], id_limit, path, field + ".id");
      const std::string& text = a["content"].get_ref<const std::string&>();
      if (const auto [it, fresh] = entry_of_id.emplace(id, k); !fresh) {
        throw Error(
            path, field + ".id",
            "id " + std::to_string(id) + " is added_tokens[" + std::to_string(it->second) + "]'s too");
      }
      if (const auto [it, fresh] = entry_of_text.emplace(text, k); !fresh) {
        throw Error(path, field + ".content",
                    as_json(text) + " is added_tokens[" + std::to_string(it->second) + "]'s too");
      }
      if (static_cast<size_t>(id) < t->vocab_.size() && !t->vocab_[id].empty()) {
        // An added token may repeat a vocabulary entry (Gemma's, Mistral's); it is then split out with that
        // id all the same. One with another text would make the id decode to what it does not encode.
        if (t->vocab_[id] != a["content"].get<std::string>()) {
          throw Error(path, field + ".id",
                      "id " + std::to_string(id) + " is model.vocab's " + as_json(t->vocab_[id]) +
                          ", not this token's " + as_json(a["content"].get<std::string>()));
        }
        t->vocab_[id].clear();
      }
      // "special": false (Gemma's "\n\n", Qwen3's "<think>"): split out of content as well.
      const bool special = !a.contains("special") || !a["special"].is_boolean() || a["special"].get<bool>();
      t->specials_.push_back(SpecialToken{a["content"].get<std::string>(), id, special});
    }
  }
  t->finish();
  return t;
}

}  // namespace crl
