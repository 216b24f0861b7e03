// The Jinja fuzz target's seed corpus (tests/fuzz/corpus/jinja_template) replayed in the normal build: each
// template parses and renders twice to the same text or the same typed error
// (tests/fuzz/jinja_template_fuzz.cpp).
#include <gtest/gtest.h>

#include <cstdint>

#include "tests/fuzz/corpus_replay.h"

namespace crl::jinja {
int fuzz_jinja_template(const uint8_t* data, size_t size);  // tests/fuzz/jinja_template_fuzz.cpp
}

namespace {

TEST(JinjaFuzz, SeedCorpusReplays) {
  EXPECT_GE(crl::testing::replay_corpus("jinja_template", crl::jinja::fuzz_jinja_template), 8u);
}

}  // namespace
