// The simulated inference server (engine/sim/inference_server.h): step timing, queueing, the batch-size
// dependent decode speed, the prefix cache after a rebuild, eviction and preemption.
#include <gtest/gtest.h>

#include <map>

#include "engine/error.h"
#include "engine/sim/inference_server.h"

namespace crl::sim {
namespace {

// Records completions by tag; may submit a follow-up request when one completes.
class Recorder final : public ServerListener {
 public:
  void on_complete(EventKernel& kernel, const ServerCompletion& c) override {
    done[c.tag] = c;
    if (auto it = follow_up.find(c.tag); it != follow_up.end()) server->submit(kernel, it->second);
  }
  std::map<uint64_t, ServerCompletion> done;
  std::map<uint64_t, ServerRequest> follow_up;
  InferenceServer* server = nullptr;
};

// A profile with round numbers: a step costs 1 ms + 1 ms per decoding sequence; prefill 1000 tokens/s.
ServerProfile simple_profile() {
  ServerProfile p;
  p.max_running = 8;
  p.kv_budget_tokens = 100000;
  p.max_prefill_tokens_per_step = 100000;
  p.prefill_tokens_per_s = 1000.0;
  p.decode_base_ms = 1.0;
  p.decode_per_seq_ms = 1.0;
  p.decode_per_kv_token_ns = 0.0;
  return p;
}

ServerRequest request(uint64_t client, uint64_t tag, int64_t prompt, int64_t shared, int64_t output) {
  ServerRequest r;
  r.client = client;
  r.tag = tag;
  r.prompt_tokens = prompt;
  r.shared_prefix_tokens = shared;
  r.output_tokens = output;
  return r;
}

constexpr SimTime kMs = 1000000;

TEST(SimInferenceServer, OneRequestTakesPrefillThenOneStepPerToken) {
  Recorder rec;
  EventKernel kernel;
  InferenceServer server(simple_profile(), rec);
  server.submit(kernel, request(1, 7, 100, 0, 3));
  kernel.run();
  const ServerCompletion& c = rec.done.at(7);
  // Step 1: 1 ms base + 100 ms prefill, yields token 1; steps 2 and 3 decode (1 + 1 ms each).
  EXPECT_EQ(c.admitted, 0);
  EXPECT_EQ(c.finished, 101 * kMs + 2 * 2 * kMs);
  EXPECT_EQ(c.prefill_tokens, 100);
  EXPECT_EQ(c.output_tokens, 3);
  EXPECT_NEAR(c.gpu_seconds, 0.105, 1e-12);
  EXPECT_NEAR(server.stats().busy_seconds, c.gpu_seconds, 1e-12);
  EXPECT_EQ(server.stats().steps, 3);
}

TEST(SimInferenceServer, RequestsQueueWhenEverySlotIsTaken) {
  ServerProfile p = simple_profile();
  p.max_running = 1;
  Recorder rec;
  EventKernel kernel;
  InferenceServer server(p, rec);
  server.submit(kernel, request(1, 1, 10, 0, 5));
  server.submit(kernel, request(2, 2, 10, 0, 5));
  kernel.run();
  const ServerCompletion &a = rec.done.at(1), &b = rec.done.at(2);
  EXPECT_EQ(a.admitted, 0);
  EXPECT_EQ(b.admitted, a.finished);  // admitted at the first step boundary after a slot frees
  EXPECT_GT(b.admitted - b.submitted, 0);
  EXPECT_EQ(b.finished - b.admitted, a.finished - a.admitted);
  EXPECT_EQ(server.stats().max_running_seen, 1);
  EXPECT_EQ(server.stats().max_queue, 2);
}

TEST(SimInferenceServer, BiggerBatchesDecodeSlowerPerSequenceButFasterInTotal) {
  auto run = [](int sequences) {
    Recorder rec;
    EventKernel kernel;
    InferenceServer server(simple_profile(), rec);
    for (int i = 0; i < sequences; ++i) server.submit(kernel, request(i, i, 1, 0, 200));
    kernel.run();
    return kernel.now();
  };
  const SimTime one = run(1), four = run(4);
  EXPECT_GT(four, one);                      // each sequence waits longer per token
  EXPECT_GT(4.0 * 200 / four, 200.0 / one);  // but the server produces more tokens per second
  // Per step: 1 ms + 1 ms x batch, so 4 sequences take (1 + 4) / (1 + 1) = 2.5x as long for 4x the tokens.
  EXPECT_NEAR(static_cast<double>(four) / one, 2.5, 0.01);
}

TEST(SimInferenceServer, PrefixCacheHitsAnUnchangedHistoryAndMissesARebuiltContext) {
  Recorder rec;
  EventKernel kernel;
  InferenceServer server(simple_profile(), rec);
  rec.server = &server;
  // Turn 1: 1000 prompt + 10 output. Turn 2 extends that sequence (1010 shared of 1200). Turn 3 is the
  // context rebuilt after a compaction: only the 50-token system prompt is shared.
  rec.follow_up[1] = request(9, 2, 1200, 1010, 10);
  rec.follow_up[2] = request(9, 3, 500, 50, 10);
  server.submit(kernel, request(9, 1, 1000, 0, 10));
  kernel.run();
  EXPECT_EQ(rec.done.at(1).cache_hit_tokens, 0);
  EXPECT_EQ(rec.done.at(2).cache_hit_tokens, 1010);
  EXPECT_EQ(rec.done.at(2).prefill_tokens, 190);
  EXPECT_EQ(rec.done.at(3).cache_hit_tokens, 50);
  EXPECT_EQ(rec.done.at(3).prefill_tokens, 450);
  EXPECT_EQ(server.stats().cache_hit_tokens, 1060);
  EXPECT_EQ(server.cached_tokens(9), 510);  // the last sequence stays cached

  // Without the cache every prompt token is computed.
  ServerProfile off = simple_profile();
  off.prefix_cache = false;
  Recorder rec2;
  EventKernel kernel2;
  InferenceServer server2(off, rec2);
  rec2.server = &server2;
  rec2.follow_up = rec.follow_up;
  server2.submit(kernel2, request(9, 1, 1000, 0, 10));
  kernel2.run();
  EXPECT_EQ(rec2.done.at(2).cache_hit_tokens, 0);
  EXPECT_EQ(rec2.done.at(2).prefill_tokens, 1200);
  EXPECT_GT(kernel2.now(), kernel.now());
}

TEST(SimInferenceServer, IdleCacheEntriesAreEvictedLeastRecentlyUsedFirst) {
  ServerProfile p = simple_profile();
  p.kv_budget_tokens = 1000;
  Recorder rec;
  EventKernel kernel;
  InferenceServer server(p, rec);
  server.submit(kernel, request(1, 1, 300, 0, 100));  // client 1 leaves a 400-token entry
  kernel.run();
  server.submit(kernel, request(2, 2, 300, 0, 100));  // client 2 leaves another: 800 cached
  kernel.run();
  EXPECT_EQ(server.cached_tokens(1), 400);
  EXPECT_EQ(server.cached_tokens(2), 400);
  server.submit(kernel, request(3, 3, 500, 0, 1));  // needs 500: client 1's (older) entry goes
  kernel.run();
  EXPECT_EQ(server.cached_tokens(1), 0);
  EXPECT_EQ(server.cached_tokens(2), 400);
  EXPECT_GE(server.stats().evicted_cache_tokens, 400);
  EXPECT_LE(server.stats().max_kv_used, p.kv_budget_tokens);
}

TEST(SimInferenceServer, GrowingSequencesOverTheKvBudgetPreemptTheLatestAdmitted) {
  ServerProfile p = simple_profile();
  p.kv_budget_tokens = 300;
  p.prefix_cache = false;
  Recorder rec;
  EventKernel kernel;
  InferenceServer server(p, rec);
  // Both fit at admission (200 of 300); after 50 decoded tokens each they no longer do.
  server.submit(kernel, request(1, 1, 100, 0, 100));
  server.submit(kernel, request(2, 2, 100, 0, 100));
  kernel.run();
  const ServerCompletion &a = rec.done.at(1), &b = rec.done.at(2);
  EXPECT_EQ(a.preemptions, 0);
  EXPECT_GE(b.preemptions, 1);
  EXPECT_GT(b.prefill_tokens, 100);  // its prompt and generated tokens were prefilled again
  EXPECT_EQ(a.output_tokens, 100);
  EXPECT_EQ(b.output_tokens, 100);
  EXPECT_GT(b.finished, a.finished);
  EXPECT_EQ(server.stats().preemptions, b.preemptions);
  EXPECT_LE(server.stats().max_kv_used, p.kv_budget_tokens);
}

TEST(SimInferenceServer, GpuSecondsAddUpToBusyTimeUnderLoad) {
  ServerProfile p = ServerProfile::h200_30b_a3b();
  p.kv_budget_tokens = 20000;
  p.max_running = 16;
  Recorder rec;
  EventKernel kernel;
  InferenceServer server(p, rec);
  for (int i = 0; i < 40; ++i) server.submit(kernel, request(i, i, 500 + 37 * i, 0, 50 + 13 * (i % 7)));
  kernel.run();
  ASSERT_EQ(rec.done.size(), 40u);
  double gpu = 0;
  for (const auto& [tag, c] : rec.done) gpu += c.gpu_seconds;
  EXPECT_NEAR(gpu, server.stats().busy_seconds, 1e-9);
  EXPECT_NEAR(static_cast<double>(kernel.now()) * 1e-9, server.stats().busy_seconds, 1e-6);
}

TEST(SimInferenceServer, ProfileValidationNamesTheField) {
  ServerProfile p;
  p.kv_budget_tokens = 0;
  try {
    p.validate("server");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "kv_budget_tokens");
  }
  p = ServerProfile{};
  p.prefill_tokens_per_s = 0;
  EXPECT_THROW(p.validate("server"), Error);
}

}  // namespace
}  // namespace crl::sim
