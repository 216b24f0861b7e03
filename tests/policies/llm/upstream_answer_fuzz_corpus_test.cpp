// Replays the upstream_answer fuzz target's seed corpus (tests/fuzz/upstream_answer_fuzz.cpp): LLM answers
// in both APIs' shapes, with spaces, texts in the log-prob entries, alternatives, a batch, numbers at the
// edges of what JSON and doubles hold; each read deterministically, the rows changing nothing.
#include "tests/fuzz/corpus_replay.h"

namespace crl::llm {
int fuzz_upstream_answer(const uint8_t* data, size_t size);  // tests/fuzz/upstream_answer_fuzz.cpp

namespace {

TEST(UpstreamAnswerFuzzCorpus, SeedCorpusReplays) {
  EXPECT_GE(testing::replay_corpus("upstream_answer", fuzz_upstream_answer), 10u);
}

}  // namespace
}  // namespace crl::llm
