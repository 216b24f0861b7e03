// `crl tokenize --train` (cli/tokenize_train.cpp): the synthetic suite's corpus, the statistics it prints,
// atomic output and typed errors that leave nothing behind.
#include "cli/tokenize_train.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "engine/bpe_tokenizer.h"
#include "engine/file_io.h"
#include "tests/crl_cli.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

TEST(tokenize_train, SyntheticEpisodesShrinkAndTheFileLoads) {
  const test::TempDir dir;
  const std::string out = dir.file("tok/tokenizer.json");
  const auto r = test::crl({"tokenize", "--train", "synthetic:dev", "--vocab", "512", "--out", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("vocabulary 512"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens per document"), std::string::npos) << r.out;
  const auto tok = BpeTokenizer::load_hf_json(out);
  EXPECT_EQ(tok->vocab_size(), 512);
  // An oracle episode of the suite: at least 2.5x fewer tokens than bytes (3.0x measured on train).
  const auto docs = cli::synthetic_corpus("dev");
  ASSERT_EQ(docs.size(), 60u);
  for (const std::string& doc : docs) {
    const auto ids = tok->encode_ordinary(doc);
    EXPECT_EQ(tok->decode(ids), doc);
    EXPECT_LT(ids.size() * 5, doc.size() * 2);
  }
  // Same corpus, same bytes.
  const std::string again = dir.file("again.json");
  ASSERT_EQ(test::crl({"tokenize", "--train", "synthetic:dev", "--out", again}).code, 0);
  EXPECT_EQ(read_file(out), read_file(again));
  // The command that shows a tokenizer reads it back.
  const auto shown = test::crl({"tokenize", "--tokenizer", out, "submit 1234"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_NE(shown.out.find("vocabulary 512"), std::string::npos);
}

// The committed tokenizer of scenarios/synthetic_tinylm.pbtxt is what the command writes today
// (data/README.md).
TEST(tokenize_train, CommittedSyntheticTokenizerRegeneratesByteForByte) {
  const test::TempDir dir;
  const std::string out = dir.file("tokenizer.json");
  const auto r = test::crl({"tokenize", "--train", "synthetic:train", "--vocab", "512", "--out", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_file(out),
            read_file(std::string(CRL_SOURCE_DIR) + "/data/tokenizers/synthetic_bpe512.json"));
}

// ... and the words tokenizer of the same file (its values one token wherever they stand), likewise.
TEST(tokenize_train, CommittedWordsTokenizerRegeneratesByteForByte) {
  const test::TempDir dir;
  const std::string out = dir.file("tokenizer.json");
  const auto r = test::crl(
      {"tokenize", "--train", "synthetic:train", "--vocab", "1024", "--pattern", "words", "--out", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_file(out),
            read_file(std::string(CRL_SOURCE_DIR) + "/data/tokenizers/synthetic_words1024.json"));
}

// --pattern words: every value of the suite is one token, the same after '=' in a record and after the
// space in `submit` (the GPT-2 pattern spells them differently), and the file round-trips the corpus.
TEST(tokenize_train, WordsPatternMakesEveryValueOneTokenWhereverItStands) {
  const test::TempDir dir;
  const std::string out = dir.file("tokenizer.json");
  const auto r = test::crl(
      {"tokenize", "--train", "synthetic:train", "--vocab", "1024", "--pattern", "words", "--out", out});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto tok = BpeTokenizer::load_hf_json(out);
  EXPECT_EQ(tok->pattern(), SplitPattern::kWords);
  for (const std::string value : {"cobalt", "9042", "deploy", "region"}) {
    const auto alone = tok->encode(value);
    ASSERT_EQ(alone.size(), 1u) << value;
    EXPECT_EQ(tok->encode("UPDATE region=" + value).back(), alone[0]) << value;
    EXPECT_EQ(tok->encode("submit " + value).back(), alone[0]) << value;
  }
  for (const std::string& doc : cli::synthetic_corpus("dev")) {
    EXPECT_EQ(tok->decode(tok->encode_ordinary(doc)), doc);
  }
}

TEST(tokenize_train, TextFileCorpusAndSpecialTokens) {
  const test::TempDir dir;
  std::string text;
  for (int i = 0; i < 300; ++i) {
    text += "the quick brown fox " + std::to_string((i * 7919) % 10000) + " [SEP] jumps\n";
  }
  const std::string corpus = dir.write("corpus.txt", text);
  const std::string out = dir.file("tokenizer.json");
  const auto r = test::crl(
      {"tokenize", "--train", corpus, "--vocab", "300", "--special", "[SEP]", "[PAD]", "--out", out});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto tok = BpeTokenizer::load_hf_json(out);
  EXPECT_EQ(tok->vocab_size(), 300);
  EXPECT_EQ(tok->special_token("[SEP]"), std::optional<TokenId>(298));
  EXPECT_EQ(tok->special_token("[PAD]"), std::optional<TokenId>(299));
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

TEST(tokenize_train, BadInputIsATypedErrorAndWritesNothing) {
  const test::TempDir dir;
  const std::string out = dir.file("tokenizer.json");
  const std::string empty = dir.write("empty.txt", "");
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"--train", "synthetic:bogus", "--out", out}, "unknown split \"bogus\""},
      {{"--train", dir.file("missing.txt"), "--out", out}, "missing.txt"},
      {{"--train", empty, "--out", out}, "the corpus is empty"},
      {{"--train", "synthetic:dev", "--vocab", "258", "--out", out}, "below 256 bytes + 3 special"},
      {{"--train", "synthetic:dev", "--min-frequency", "0", "--out", out}, "min_frequency"},
      {{"--train", "synthetic:dev"}, "needs --out"},
      {{"--train", "synthetic:dev", "--out", dir.file("tokenizer.txt")}, "must end in .json"},
      {{"--train", "synthetic:dev", "--special", "<a>", "<a>", "--out", out}, "duplicate special token"},
      {{"--train", "synthetic:dev", "--pattern", "bytes", "--out", out}, "unknown split pattern \"bytes\""},
      {{"--train", "synthetic:dev", "--pattern", "deepseek_v3", "--out", out}, "sequence of three splits"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"tokenize"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = test::crl(args);
    EXPECT_NE(r.code, 0) << c.expect;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  // Only the target was ever written: no temporary file is left behind.
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.path() != empty;
  EXPECT_EQ(files, 0u);
}

}  // namespace
}  // namespace crl
