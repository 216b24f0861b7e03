// The tokenizer.json fuzz target's seed corpus (tests/fuzz/corpus/tokenizer_json: six real models' file
// layouts with small vocabularies) replayed in the normal build: each file loads, or is refused with
// crl::Error, and what loads encodes and decodes its probes exactly (tests/fuzz/tokenizer_json_fuzz.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/bpe_tokenizer.h"
#include "engine/error.h"
#include "tests/fuzz/corpus_replay.h"

namespace crl {
int fuzz_tokenizer_json(const uint8_t* data, size_t size);  // tests/fuzz/tokenizer_json_fuzz.cpp
}

namespace {

TEST(TokenizerJsonFuzz, SeedCorpusReplays) {
  EXPECT_GE(crl::testing::replay_corpus("tokenizer_json", crl::fuzz_tokenizer_json), 6u);
}

// The models' layouts (*_small.json) load, so the replay checks the probes' round trip in each layout, not
// only refusals; the other seeds are the fuzzer's finds, refused since (an added token on the id of a
// vocabulary entry with another text, an added id listed twice).
TEST(TokenizerJsonFuzz, TheModelsLayoutsLoadAndTheFindsAreRefused) {
  const auto dir = std::filesystem::path(CRL_SOURCE_DIR) / "tests/fuzz/corpus/tokenizer_json";
  size_t layouts = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    if (entry.path().filename().string().ends_with("_small.json")) {
      ++layouts;
      EXPECT_NO_THROW(crl::BpeTokenizer::parse_hf_json(bytes.str(), entry.path().string())) << entry.path();
    } else {
      EXPECT_THROW(crl::BpeTokenizer::parse_hf_json(bytes.str(), entry.path().string()), crl::Error)
          << entry.path();
    }
  }
  EXPECT_EQ(layouts, 6u);
}

}  // namespace
