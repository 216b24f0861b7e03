// The gateway's fuzz targets' seed corpora replayed in the normal build:
//  model_reply (tests/fuzz/model_reply_fuzz.cpp): for each sampled text in every tool-call format, the
//    harness's copy of the answer in every API, whole and streamed, is recognised as the answer;
//  gateway_body (tests/fuzz/gateway_body_fuzz.cpp): a session's bodies in each API decode through the kept
//    body exactly as whole.
#include <gtest/gtest.h>

#include <cstdint>

#include "tests/fuzz/corpus_replay.h"

namespace crl::server::gateway {
int fuzz_model_reply(const uint8_t* data, size_t size);   // tests/fuzz/model_reply_fuzz.cpp
int fuzz_gateway_body(const uint8_t* data, size_t size);  // tests/fuzz/gateway_body_fuzz.cpp
}  // namespace crl::server::gateway

namespace {

TEST(ModelReplyFuzz, SeedCorpusReplays) {
  EXPECT_GE(crl::testing::replay_corpus("model_reply", crl::server::gateway::fuzz_model_reply), 20u);
}

TEST(GatewayBodyFuzz, SeedCorpusReplays) {
  EXPECT_GE(crl::testing::replay_corpus("gateway_body", crl::server::gateway::fuzz_gateway_body), 8u);
}

}  // namespace
