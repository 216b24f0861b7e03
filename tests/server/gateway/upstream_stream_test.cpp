// A streamed upstream call (server/gateway/upstream.h UpstreamCall::sampled): SGLang's "stream": true, its
// events read as they arrive (either kind SGLang writes), the ids handed on before the answer ends, the
// answer the same as the one asked whole, and the failures of a stream: cut, an error event, malformed
// events, and no retry once ids went on.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "engine/context.h"
#include "engine/token.h"
#include "server/gateway/upstream.h"
#include "tests/policies/llm/scripted_llm_server.h"

namespace crl::server::gateway {
namespace {

// What the sink saw: the number of ids at each call, and when the first came.
struct Seen final : SampledTokens {
  std::vector<size_t> counts;
  std::vector<TokenId> last;
  std::chrono::steady_clock::time_point first{};
  void sampled(const llm::GenerateResult& so_far) override {
    const std::vector<TokenId>& ids = so_far.ids;
    if (counts.empty()) first = std::chrono::steady_clock::now();
    EXPECT_TRUE(counts.empty() || ids.size() > counts.back()) << "each call brings new ids";
    EXPECT_TRUE(std::equal(last.begin(), last.end(), ids.begin())) << "the ids so far only grow";
    counts.push_back(ids.size());
    last.assign(ids.begin(), ids.end());
  }
};

struct StreamCall {
  TokenArena arena;
  std::vector<TokenId> ids = {'h', 'i'};
  PromptView prompt{&arena, {arena.append(ids, Provenance::kPrompt)}};
  UpstreamResult run(Upstream& upstream, SampledTokens* sink, uint64_t seed = 1, int top = 0) {
    UpstreamCall call;
    call.prompt = &prompt;
    call.max_new_tokens = 64;
    call.sampling_seed = seed;
    call.rid = "t/" + std::to_string(seed);
    call.sampled = sink;
    call.sampling.top_logprobs = top;
    return upstream.generate(call);
  }
};

UpstreamOptions options_for(const crl::testing::ScriptedLlmServer& stand_in) {
  UpstreamOptions options;
  options.base_url = stand_in.url();
  options.vocab_size = 259;
  options.max_retries = 2;
  options.backoff_s = 0.001;
  options.request_timeout_s = 30;
  return options;
}

std::string twelve(std::string_view, uint64_t) {
  return "twelve bytes";
}

// The same call (seed 7, two alternatives per token) asked whole, then streamed into `seen`: the streamed
// answer, checked to be the whole one (ids, log-probs, alternatives, finish reason).
UpstreamResult streamed_and_whole(Upstream& upstream, Seen& seen) {
  StreamCall whole_call, streamed_call;
  const UpstreamResult whole = whole_call.run(upstream, nullptr, 7, 2);
  const UpstreamResult streamed = streamed_call.run(upstream, &seen, 7, 2);
  EXPECT_TRUE(whole.ok) << whole.error;
  EXPECT_TRUE(streamed.ok) << streamed.error;
  EXPECT_EQ(streamed.answer.ids, whole.answer.ids);
  EXPECT_EQ(streamed.answer.logprobs, whole.answer.logprobs);
  EXPECT_EQ(streamed.answer.finish_reason, whole.answer.finish_reason);
  EXPECT_EQ(streamed.answer.top.size(), whole.answer.top.size());
  for (size_t i = 0; i < std::min(whole.answer.top.size(), streamed.answer.top.size()); ++i) {
    EXPECT_EQ(streamed.answer.top[i].size(), whole.answer.top[i].size());
    for (size_t k = 0; k < std::min(whole.answer.top[i].size(), streamed.answer.top[i].size()); ++k)
      EXPECT_EQ(streamed.answer.top[i][k].id, whole.answer.top[i][k].id);
  }
  return streamed;
}

TEST(UpstreamStream, BothKindsOfSglangStreamGiveTheWholeAnswerTokenByToken) {
  for (const bool incremental : {false, true}) {
    crl::testing::ScriptedLlmOptions llm;
    llm.script = twelve;
    llm.incremental_stream = incremental;
    crl::testing::ScriptedLlmServer stand_in(llm);
    Upstream upstream(options_for(stand_in));
    Seen seen;
    const UpstreamResult streamed = streamed_and_whole(upstream, seen);
    EXPECT_EQ(streamed.answer.cached_tokens, 1) << "the last event's count (the stand-in: half the prompt)";
    // One event per token (12 bytes and <|im_end|>); events read together go on together.
    ASSERT_FALSE(seen.counts.empty());
    EXPECT_EQ(seen.counts.back(), 13u) << "incremental " << incremental;
    EXPECT_EQ(stand_in.connections(), 1u) << "the connection is kept after a stream";
  }
}

TEST(UpstreamStream, TheFirstIdsArriveBeforeTheAnswerEnds) {
  crl::testing::ScriptedLlmOptions llm;
  llm.script = twelve;
  llm.stream_event_delay_s = 0.02;  // 13 events: about a quarter of a second in all
  crl::testing::ScriptedLlmServer stand_in(llm);
  Upstream upstream(options_for(stand_in));
  Seen seen;
  StreamCall call;
  const auto start = std::chrono::steady_clock::now();
  const UpstreamResult result = call.run(upstream, &seen);
  const auto end = std::chrono::steady_clock::now();
  ASSERT_TRUE(result.ok) << result.error;
  // (Compared with the call's own length, not a fixed time: the first id came with the first event.)
  EXPECT_LT(seen.first - start, (end - start) / 2);
  EXPECT_GT(seen.counts.size(), 6u) << "events 20 ms apart go on one by one";
}

TEST(UpstreamStream, ACutStreamOrAnErrorEventFailsTheCallWithoutARetry) {
  for (const std::string fault : {"stream_cut", "stream_error"}) {
    crl::testing::ScriptedLlmOptions llm;
    llm.script = twelve;
    llm.faults.sticky_every = 1;
    llm.faults.sticky_fault = fault;
    llm.stream_event_delay_s = 0.01;  // (the first ids go on before the failure is read)
    crl::testing::ScriptedLlmServer stand_in(llm);
    Upstream upstream(options_for(stand_in));
    Seen seen;
    StreamCall call;
    const UpstreamResult result = call.run(upstream, &seen);
    EXPECT_FALSE(result.ok) << fault;
    EXPECT_FALSE(seen.counts.empty()) << fault << ": ids went on before the failure";
    EXPECT_EQ(stand_in.attempts(), 1u) << fault << ": ids went on, so the answer is not sampled again";
    if (fault == "stream_cut") {
      EXPECT_EQ(result.code, "upstream_unavailable");
      EXPECT_NE(result.error.find("while the answer streamed"), std::string::npos) << result.error;
    } else {
      EXPECT_EQ(result.code, "upstream_malformed");
      EXPECT_NE(result.error.find("failed on purpose"), std::string::npos) << result.error;
    }
  }
}

TEST(UpstreamStream, FailuresBeforeAnyIdAreRetriedAsBefore) {
  crl::testing::ScriptedLlmOptions llm;
  llm.script = twelve;
  llm.faults.transient_5xx = 1;
  llm.faults.transient_drops = 1;
  crl::testing::ScriptedLlmServer stand_in(llm);
  Upstream upstream(options_for(stand_in));
  Seen seen;
  StreamCall call;
  const UpstreamResult result = call.run(upstream, &seen);
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_EQ(stand_in.attempts(), 3u);
  ASSERT_FALSE(seen.counts.empty());
  EXPECT_EQ(seen.counts.back(), 13u);
}

// The OpenAI API's stream (vLLM's chunks): the same answer as asked whole, token by token; a cut stream or
// vLLM's error event fails it without a retry.
TEST(UpstreamStream, TheOpenAiApisStreamGivesTheWholeAnswerTokenByToken) {
  crl::testing::ScriptedLlmOptions llm;
  llm.script = twelve;
  crl::testing::ScriptedLlmServer stand_in(llm);
  UpstreamOptions options = options_for(stand_in);
  options.api = llm::ApiKind::kOpenAi;
  Upstream upstream(options);
  Seen seen;
  const UpstreamResult streamed = streamed_and_whole(upstream, seen);
  EXPECT_EQ(streamed.answer.prompt_tokens, 2) << "the usage chunk's count";
  ASSERT_FALSE(seen.counts.empty());
  EXPECT_EQ(seen.counts.back(), 13u);
  for (const std::string fault : {"stream_cut", "stream_error"}) {
    crl::testing::ScriptedLlmOptions failing = llm;
    failing.faults.sticky_every = 1;
    failing.faults.sticky_fault = fault;
    failing.stream_event_delay_s = 0.01;  // (the first ids go on before the failure is read)
    crl::testing::ScriptedLlmServer bad(failing);
    UpstreamOptions bad_options = options_for(bad);
    bad_options.api = llm::ApiKind::kOpenAi;
    Upstream bad_upstream(bad_options);
    Seen partial;
    StreamCall call;
    const UpstreamResult result = call.run(bad_upstream, &partial);
    EXPECT_FALSE(result.ok) << fault;
    EXPECT_FALSE(partial.counts.empty()) << fault;
    EXPECT_EQ(bad.attempts(), 1u) << fault;
    if (fault == "stream_error") {
      EXPECT_NE(result.error.find("failed on purpose"), std::string::npos) << result.error;
    }
  }
}

// A prompt the server cut shows in the stream too: its first chunk's prompt_token_ids, or its usage chunk.
TEST(UpstreamStream, AStreamThatRanAnotherPromptFailsTheCall) {
  for (const llm::ApiKind api : {llm::ApiKind::kSglang, llm::ApiKind::kOpenAi}) {
    crl::testing::ScriptedLlmOptions llm;
    llm.script = twelve;
    llm.faults.sticky_every = 1;
    llm.faults.sticky_fault = "truncate";
    crl::testing::ScriptedLlmServer stand_in(llm);
    UpstreamOptions options = options_for(stand_in);
    options.api = api;
    Upstream upstream(options);
    Seen seen;
    StreamCall call;
    const UpstreamResult result = call.run(upstream, &seen);
    EXPECT_FALSE(result.ok);
    EXPECT_EQ(result.code, "upstream_malformed");
    EXPECT_NE(result.error.find("did not run the prompt it was sent"), std::string::npos) << result.error;
    EXPECT_TRUE(seen.counts.empty()) << "nothing of an answer to another prompt goes on";
  }
}

}  // namespace
}  // namespace crl::server::gateway
