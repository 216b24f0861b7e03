#include "policies/llm/streamed_answer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace crl::llm {
namespace {

using json = nlohmann::json;

// An SGLang /generate event holding ids [from, to) of `ids` (to == ids.size() and `last`: finished).
std::string event(const std::vector<int>& ids, size_t from, size_t to, bool last, int prompt_tokens = 5) {
  json out_ids = json::array(), logprobs = json::array();
  for (size_t i = from; i < to; ++i) {
    out_ids.push_back(ids[i]);
    logprobs.push_back({-0.25 * static_cast<double>(i + 1), ids[i], nullptr});
  }
  const json finish = last ? json{{"type", "stop"}, {"matched", ids.back()}} : json(nullptr);
  return json{{"text", "ignored"},
              {"output_ids", out_ids},
              {"meta_info",
               {{"id", "r"},
                {"finish_reason", finish},
                {"prompt_tokens", prompt_tokens},
                {"completion_tokens", to},
                {"cached_tokens", 3},
                {"output_token_logprobs", logprobs}}}}
      .dump();
}

const std::vector<int> kIds = {10, 11, 12, 13, 14};

void expect_whole(const StreamedAnswer& answer) {
  ASSERT_TRUE(answer.finished());
  EXPECT_TRUE(answer.answer().ok);
  EXPECT_EQ(answer.answer().ids, std::vector<TokenId>(kIds.begin(), kIds.end()));
  ASSERT_EQ(answer.answer().logprobs.size(), kIds.size());
  for (size_t i = 0; i < kIds.size(); ++i)
    EXPECT_EQ(answer.answer().logprobs[i], static_cast<float>(-0.25 * static_cast<double>(i + 1)));
  EXPECT_EQ(answer.answer().finish_reason, "stop");
  EXPECT_EQ(answer.answer().cached_tokens, 3);
}

TEST(StreamedAnswer, ReadsSglangsDefaultStreamOfAnswersSoFar) {
  StreamedAnswer answer(ApiKind::kSglang, 100, 0, {});
  for (size_t n = 1; n <= kIds.size(); ++n) {
    ASSERT_TRUE(answer.add(event(kIds, 0, n, n == kIds.size()))) << answer.error();
    EXPECT_EQ(answer.answer().ids.size(), n);
    EXPECT_EQ(answer.finished(), n == kIds.size());
  }
  expect_whole(answer);
}

TEST(StreamedAnswer, ReadsTheIncrementalStream) {
  StreamedAnswer answer(ApiKind::kSglang, 100, 0, {});
  // (several tokens in one event too, as a speculative decoder or stream_interval > 1 sends them)
  ASSERT_TRUE(answer.add(event(kIds, 0, 1, false))) << answer.error();
  ASSERT_TRUE(answer.add(event(kIds, 1, 3, false))) << answer.error();
  ASSERT_TRUE(answer.add(event(kIds, 3, 5, true))) << answer.error();
  expect_whole(answer);
}

TEST(StreamedAnswer, RefusesEventsThatContradictTheStream) {
  {
    StreamedAnswer answer(ApiKind::kSglang, 100, 0, {});
    ASSERT_TRUE(answer.add(event(kIds, 0, 2, false)));
    std::vector<int> other = kIds;
    other[0] = 99;
    EXPECT_FALSE(answer.add(event(other, 0, 3, false)));
    EXPECT_NE(answer.error().find("other ids"), std::string::npos) << answer.error();
  }
  {
    StreamedAnswer answer(ApiKind::kSglang, 100, 0, {});
    ASSERT_TRUE(answer.add(event(kIds, 0, 2, false)));
    // two ids after two, where the event says five were sampled: neither the answer so far nor the ids
    // that follow it (a lost event)
    EXPECT_FALSE(answer.add(event(kIds, 3, 5, false)));
    EXPECT_NE(answer.error().find("were read before"), std::string::npos) << answer.error();
  }
  {
    StreamedAnswer answer(ApiKind::kSglang, 100, 0, {});
    ASSERT_TRUE(answer.add(event(kIds, 0, 5, true)));
    EXPECT_FALSE(answer.add(event(kIds, 0, 5, true)));
    EXPECT_NE(answer.error().find("after the one that finished"), std::string::npos) << answer.error();
  }
}

TEST(StreamedAnswer, ChecksEachEventAsAWholeAnswerIsChecked) {
  StreamedAnswer out_of_vocabulary(ApiKind::kSglang, 12, 0, {});
  EXPECT_FALSE(out_of_vocabulary.add(event(kIds, 0, 3, false)));
  EXPECT_NE(out_of_vocabulary.error().find("vocabulary"), std::string::npos) << out_of_vocabulary.error();
  StreamedAnswer not_json(ApiKind::kSglang, 100, 0, {});
  EXPECT_FALSE(not_json.add("{\"output_ids\": [1,"));
  EXPECT_FALSE(not_json.answer().ok);
  // A prompt the server cut: each event names its length.
  const std::vector<TokenId> prompt = {1, 2, 3, 4};
  TokenArena arena;
  const PromptView view(&arena, {arena.append(prompt, Provenance::kPrompt)});
  StreamedAnswer cut(ApiKind::kSglang, 100, 0, SentPrompt{&view, {}});
  EXPECT_FALSE(cut.add(event(kIds, 0, 1, false, 3)));
  EXPECT_NE(cut.error().find("prompt_tokens"), std::string::npos) << cut.error();
}

TEST(StreamedAnswer, AnErrorEventFailsTheAnswerWithItsMessage) {
  StreamedAnswer answer(ApiKind::kSglang, 100, 0, {});
  ASSERT_TRUE(answer.add(event(kIds, 0, 2, false)));
  EXPECT_FALSE(answer.add(R"({"error": {"message": "CUDA out of memory"}})"));
  EXPECT_NE(answer.error().find("CUDA out of memory"), std::string::npos) << answer.error();
  EXPECT_FALSE(answer.finished());
}

}  // namespace
}  // namespace crl::llm
