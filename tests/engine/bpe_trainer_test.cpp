// Byte-level BPE training (engine/bpe_trainer.h): the written tokenizer.json loads in the engine's loader and
// in the LLM path, round-trips every byte string, respects the vocabulary size, follows the documented tie
// rule, is deterministic, has the fields Hugging Face requires, and encodes as a Hugging Face implementation
// does (@lenml/tokenizers, a port of transformers.js, installed for the tokenizer oracle; skips without it).
#include "engine/bpe_trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/bpe_tokenizer.h"
#include "engine/chat_template.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/rng.h"
#include "engine/tokenizer.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

// Varied enough that 512 tokens are learned (numbers, words, punctuation, non-ASCII, special tokens).
std::vector<std::string> sample_corpus() {
  static const char* words[] = {"alpha", "bravo",  "charlie", "delta", "echo", "foxtrot",  "golf",  "hotel",
                                "india", "juliet", "kilo",    "lima",  "mike", "november", "oscar", "papa"};
  std::vector<std::string> docs;
  for (int i = 0; i < 120; ++i) {
    std::string doc = "record " + std::to_string(i) + ": NOTE key=code-" +
                      std::to_string((i * 7919) % 10000) +
                      " value is the latest update; next\nsubmit answer " + std::to_string(i % 7) +
                      " <|im_end|>\n  héllo wörld — ünïcödé 日本語 tabs\tand\r\nnewlines";
    for (int k = 0; k < 6; ++k) doc += std::string(" ") + words[(i * 5 + k * 3) % 16] + words[(i + k) % 16];
    docs.push_back(doc);
  }
  return docs;
}

std::shared_ptr<const BpeTokenizer> write_and_load(const test::TempDir& dir, const BpeModel& model) {
  const std::string path = dir.file("tokenizer.json");
  write_file_atomic(path, bpe_tokenizer_json(model));
  return BpeTokenizer::load_hf_json(path);
}

TEST(bpe_trainer, RoundTripsEveryByteStringAndLoadsInTheEngineLoader) {
  const test::TempDir dir;
  const BpeModel model = train_bpe(sample_corpus(), BpeTrainOptions{});
  const auto tok = write_and_load(dir, model);
  EXPECT_EQ(tok->vocab_size(), 512);
  std::vector<std::string> inputs = sample_corpus();
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  inputs.push_back(all_bytes);
  inputs.push_back("");
  inputs.push_back("\xff\xfe invalid \xc3 utf-8 \xe6\x97");
  Rng rng(StreamKey{42, 0, 0, StreamRole::kEnvironment, 0});
  for (int k = 0; k < 50; ++k) {  // random byte strings
    std::string s;
    const int n = static_cast<int>(rng.next_u32() % 200);
    for (int i = 0; i < n; ++i) s += static_cast<char>(rng.next_u32() & 0xff);
    inputs.push_back(s);
  }
  for (const std::string& s : inputs) {
    EXPECT_EQ(tok->decode(tok->encode_ordinary(s)), s);
    EXPECT_EQ(tok->decode(tok->encode(s)), s);
  }
  // The learned merges compress the corpus; special tokens are one id each.
  const std::string doc = sample_corpus()[3];
  EXPECT_LT(tok->encode(doc).size() * 2, doc.size());
  EXPECT_EQ(tok->special_token("<|im_end|>"), std::optional<TokenId>(511));
  EXPECT_EQ(tok->encode("<|im_start|>"), std::vector<TokenId>{510});
}

TEST(bpe_trainer, LoadsInTheLlmPathWithAChatTemplate) {
  const test::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  write_file_atomic(path, bpe_tokenizer_json(train_bpe(sample_corpus(), BpeTrainOptions{})));
  const auto tok = make_tokenizer(path);  // what --tokenizer PATH does in every LLM command
  const ChatTemplate chatml = chat_template_by_name("chatml");
  const auto ids = tok->encode_pieces(chatml.turn_pieces(ChatRole::kUser, "next"));
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 510);  // <|im_start|> is its special id, not text
  EXPECT_NE(std::find(ids.begin(), ids.end(), 511), ids.end());
  EXPECT_EQ(tok->decode(ids), "<|im_start|>user\nnext<|im_end|>\n");
}

TEST(bpe_trainer, IsDeterministicAndIndependentOfDocumentOrder) {
  auto docs = sample_corpus();
  const std::string a = bpe_tokenizer_json(train_bpe(docs, BpeTrainOptions{}));
  const std::string b = bpe_tokenizer_json(train_bpe(docs, BpeTrainOptions{}));
  std::reverse(docs.begin(), docs.end());
  const std::string c = bpe_tokenizer_json(train_bpe(docs, BpeTrainOptions{}));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
}

TEST(bpe_trainer, RespectsTheVocabularySize) {
  for (int vocab : {259, 260, 300, 400}) {
    const BpeModel model = train_bpe(
        sample_corpus(), BpeTrainOptions{vocab, 2, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}});
    EXPECT_EQ(static_cast<int>(model.vocab.size()), vocab);
    const test::TempDir dir;
    EXPECT_EQ(write_and_load(dir, model)->vocab_size(), vocab);
  }
  // A tiny corpus runs out of pairs seen twice: fewer tokens, never more.
  const std::vector<std::string> tiny = {"abab xyz"};
  const BpeModel model = train_bpe(tiny, BpeTrainOptions{512, 2, {}});
  ASSERT_EQ(model.merges.size(), 1u);  // only "ab" occurs twice
  EXPECT_EQ(model.vocab.size(), 257u);
  EXPECT_EQ(model.vocab[256], "ab");
}

TEST(bpe_trainer, BreaksTiesByTheSmallerPair) {
  // One piece per document. "cd" and "ab" both occur 3 times; (a, b) < (c, d) as (left id, right id), so
  // "ab" is merge 0 whatever the order of the documents; then "cd" (3) before "xy" (2).
  std::vector<std::string> docs = {"cd", "cd", "cd", "xy", "xy", "ab", "ab", "ab"};
  for (int pass = 0; pass < 2; ++pass) {
    const BpeModel model = train_bpe(docs, BpeTrainOptions{259, 2, {}});
    ASSERT_EQ(model.merges.size(), 3u);
    EXPECT_EQ(model.vocab[256], "ab");
    EXPECT_EQ(model.vocab[257], "cd");
    EXPECT_EQ(model.vocab[258], "xy");
    std::reverse(docs.begin(), docs.end());
  }
}

TEST(bpe_trainer, BadOptionsAreTypedErrors) {
  const auto docs = sample_corpus();
  auto message = [&](const BpeTrainOptions& o) {
    try {
      train_bpe(docs, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      message(BpeTrainOptions{258, 2, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}}).find("below 256"),
      std::string::npos);
  EXPECT_NE(message(BpeTrainOptions{512, 0, {}}).find("min_frequency"), std::string::npos);
  EXPECT_NE(message(BpeTrainOptions{512, 2, {""}}).find("empty special"), std::string::npos);
  EXPECT_NE(message(BpeTrainOptions{512, 2, {"<a>", "<a>"}}).find("duplicate special"), std::string::npos);
}

TEST(bpe_trainer, SpecialTokensAreNeverMergedAcross) {
  std::vector<std::string> docs;
  for (int i = 0; i < 20; ++i) docs.push_back("x<|im_end|>y x<|im_end|>y");
  const BpeModel model = train_bpe(docs, BpeTrainOptions{300, 2, {"<|im_end|>"}});
  for (size_t id = 256; id + 1 < model.vocab.size(); ++id) {
    EXPECT_EQ(model.vocab[id].find('|'), std::string::npos) << model.vocab[id];
  }
}

// The fields Hugging Face's tokenizers (Rust, serde) require of a byte-level BPE tokenizer.json, and the
// conventions it writes: checked structurally, since Debian has no python3-tokenizers.
TEST(bpe_trainer, JsonHasTheFieldsHuggingFaceRequires) {
  const BpeModel model = train_bpe(sample_corpus(), BpeTrainOptions{});
  const auto root = nlohmann::json::parse(bpe_tokenizer_json(model));
  for (const char* key : {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                          "post_processor", "decoder", "model"}) {
    EXPECT_TRUE(root.contains(key)) << key;
  }
  EXPECT_EQ(root["version"], "1.0");
  EXPECT_EQ(root["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(root["pre_tokenizer"]["add_prefix_space"], false);
  EXPECT_EQ(root["pre_tokenizer"]["use_regex"], true);
  EXPECT_EQ(root["decoder"]["type"], "ByteLevel");
  const auto& m = root["model"];
  EXPECT_EQ(m["type"], "BPE");
  for (const char* key : {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                          "fuse_unk", "byte_fallback", "vocab", "merges"}) {
    EXPECT_TRUE(m.contains(key)) << key;
  }
  ASSERT_TRUE(m["vocab"].is_object());
  EXPECT_EQ(m["vocab"].size(), 512u);
  std::set<int> ids;
  for (const auto& [token, id] : m["vocab"].items()) ids.insert(id.get<int>());
  EXPECT_EQ(ids.size(), 512u);
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), 511);
  EXPECT_EQ(m["vocab"]["Ġ"], 32);  // GPT-2's byte alphabet: the space byte is U+0120
  ASSERT_EQ(m["merges"].size(), model.merges.size());
  for (const auto& merge : m["merges"]) {
    const std::string s = merge.get<std::string>();
    const size_t space = s.find(' ');
    ASSERT_NE(space, std::string::npos);
    EXPECT_EQ(s.find(' ', space + 1), std::string::npos);
    EXPECT_TRUE(m["vocab"].contains(s.substr(0, space) + s.substr(space + 1))) << s;
  }
  ASSERT_EQ(root["added_tokens"].size(), 3u);
  for (const auto& a : root["added_tokens"]) {
    for (const char* key : {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}) {
      EXPECT_TRUE(a.contains(key)) << key;
    }
    EXPECT_EQ(m["vocab"][a["content"].get<std::string>()], a["id"]);
  }
}

// Encodes with a Hugging Face implementation (transformers.js port) and compares ids with ours.
void expect_encodes_as_hugging_face(const BpeTrainOptions& options) {
  const std::string modules = std::string(CRL_SOURCE_DIR) + "/tests/engine/tokenizer_oracle/node_modules";
  if (std::system("command -v node >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not on PATH";
  if (!std::filesystem::exists(modules + "/@lenml/tokenizers")) {
    GTEST_SKIP() << modules << "/@lenml/tokenizers is missing; run scripts/install_deps.sh (or npm ci in "
                 << "tests/engine/tokenizer_oracle)";
  }
  const test::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  write_file_atomic(path, bpe_tokenizer_json(train_bpe(sample_corpus(), options)));
  const auto tok = BpeTokenizer::load_hf_json(path);
  ASSERT_EQ(tok->pattern(), options.pattern);
  std::vector<std::string> texts = sample_corpus();
  texts.push_back("Task: record 3 NOTE key=1234; <|im_start|>user héllo  wörld\n\n x");
  texts.push_back("submit 4471\n<|endoftext|>  spaces   and\ttabs");
  texts.push_back("UPDATE region=cobalt | submit {\"plan\": [\"audit\", \"deploy\"]} it's x2y3 !!  \n\n");
  const std::string input = dir.write("input.json", nlohmann::json(texts).dump());
  const std::string script = dir.write("encode.js", R"(
const fs = require('fs');
const { TokenizerLoader } = require('@lenml/tokenizers');
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(process.argv[2], 'utf8')),
  tokenizerConfig: { tokenizer_class: 'PreTrainedTokenizer' } });
const texts = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
process.stdout.write(JSON.stringify(texts.map(t => Array.from(tok.encode(t, { add_special_tokens: false })))));
)");
  const std::string command = "NODE_PATH=" + modules + " node " + script + " " + path + " " + input;
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  ASSERT_EQ(::pclose(pipe), 0) << output;
  const auto theirs = nlohmann::json::parse(output);
  ASSERT_EQ(theirs.size(), texts.size());
  for (size_t k = 0; k < texts.size(); ++k) {
    EXPECT_EQ(theirs[k].get<std::vector<TokenId>>(), tok->encode(texts[k])) << texts[k];
  }
}

TEST(bpe_trainer, EncodesAsAHuggingFaceImplementation) {
  expect_encodes_as_hugging_face(BpeTrainOptions{});
}

TEST(bpe_trainer, EncodesAsAHuggingFaceImplementationWithTheWordsPattern) {
  BpeTrainOptions options;
  options.pattern = SplitPattern::kWords;
  expect_encodes_as_hugging_face(options);
}

// The words pattern: letters, digits, symbols and whitespace are separate pieces, so a value is the same
// tokens after '=' and after a space (with the GPT-2 pattern " cobalt" and "cobalt" are different pieces);
// the file says so in a Split pre-tokenizer that the loader reads back.
TEST(bpe_trainer, TheWordsPatternGivesAValueTheSameTokensWhereverItStands) {
  EXPECT_EQ(pre_tokenize(SplitPattern::kWords, "UPDATE region=cobalt;  x2\n"),
            (std::vector<size_t>{6, 7, 13, 14, 20, 21, 23, 24, 25, 26}));
  BpeTrainOptions options;
  options.pattern = SplitPattern::kWords;
  std::vector<std::string> docs = sample_corpus();
  for (int i = 0; i < 20; ++i)
    docs.push_back("UPDATE region=cobalt; NOTE x=4471\nsubmit cobalt\nsubmit 4471\n");
  const BpeModel model = train_bpe(docs, options);
  const test::TempDir dir;
  const auto words = write_and_load(dir, model);
  EXPECT_EQ(words->pattern(), SplitPattern::kWords);
  const auto tail = [&](const std::string& text, size_t n) {
    const auto ids = words->encode(text);
    return std::vector<TokenId>(ids.end() - static_cast<std::ptrdiff_t>(n), ids.end());
  };
  const auto cobalt = words->encode("cobalt");
  EXPECT_EQ(tail("region=cobalt", cobalt.size()), cobalt);
  EXPECT_EQ(tail("submit cobalt", cobalt.size()), cobalt);
  const auto code = words->encode("4471");
  EXPECT_EQ(tail("x=4471", code.size()), code);
  EXPECT_EQ(tail("submit 4471", code.size()), code);
  EXPECT_EQ(cobalt.size(), 1u);  // frequent enough to be merged whole
  const auto root = nlohmann::json::parse(bpe_tokenizer_json(model));
  EXPECT_EQ(root["pre_tokenizer"]["type"], "Sequence");
  EXPECT_EQ(root["pre_tokenizer"]["pretokenizers"][0]["type"], "Split");
  EXPECT_EQ(root["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"],
            std::string(split_pattern_regex(SplitPattern::kWords)));
  EXPECT_EQ(root["pre_tokenizer"]["pretokenizers"][1]["use_regex"], false);
  // The GPT-2 pattern keeps the space on the word: the same value is two different pieces.
  const auto gpt2 = write_and_load(dir, train_bpe(docs, BpeTrainOptions{}));
  EXPECT_NE(gpt2->encode("=cobalt").back(), gpt2->encode(" cobalt").back());
}

}  // namespace
}  // namespace crl
