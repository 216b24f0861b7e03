// Replays the scenario parser's fuzz seed corpus (tests/fuzz/corpus/scenario_parser) through the fuzz
// target's function in the normal build, so the target's properties are checked in CI without libFuzzer.
#include <gtest/gtest.h>

#include "tests/fuzz/corpus_replay.h"

namespace crl::scenarios {
int fuzz_scenario_parser(const uint8_t* data, size_t size);
namespace {

TEST(ScenarioFuzzCorpus, SeedCorpusReplays) {
  EXPECT_GE(crl::testing::replay_corpus("scenario_parser", fuzz_scenario_parser), 10u);
}

}  // namespace
}  // namespace crl::scenarios
