// policies/lm sampling: the KV cache against the full forward pass, determinism under regrouping, greedy,
// top-k, top-p and temperature edge cases, stop ids and limits, the prompt's log-probs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "lm_test_util.h"
#include "policies/lm/cpu/sampler.h"

namespace crl::lm {
namespace {

std::vector<SampleRequest> make_requests(const LmConfig& c, int n) {
  std::vector<SampleRequest> r;
  const PackedBatch prompts = test::make_batch(c, std::vector<int>{3, 1, 5, 2, 4, 6}, 21);
  for (int i = 0; i < n; ++i) {
    const int s = i % prompts.sequences();
    r.push_back(SampleRequest{std::vector<int32_t>(prompts.tokens.begin() + prompts.offsets[s],
                                                   prompts.tokens.begin() + prompts.offsets[s + 1]),
                              StreamKey{17, static_cast<uint64_t>(i), 0, StreamRole::kExecute, 0}});
  }
  return r;
}

// Feeds a 16-token sequence through a KV cache one token at a time: each step's logits equal the training
// pass's row. Returns the cache (full).
KvCache expect_cache_matches_forward(const LmConfig& c, const LmModel& m) {
  const PackedBatch b = test::make_batch(c, {16});
  const ForwardResult f = m.forward(b);
  KvCache cache(c);
  for (int t = 0; t < b.size(); ++t) {
    const RowVector& logits = cache.push(m, b.tokens[t]);
    const float scale = f.logits.row(t).cwiseAbs().maxCoeff();
    for (int v = 0; v < c.vocab; ++v) EXPECT_NEAR(logits[v], f.logits(t, v), 1e-5f * scale) << t << " " << v;
  }
  return cache;
}

TEST(LmSampler, CacheGivesTheLogitsOfTheFullForwardPass) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  KvCache cache = expect_cache_matches_forward(c, m);
  EXPECT_EQ(cache.length(), 16);
  EXPECT_THROW(cache.push(m, 0), std::invalid_argument);  // full
}

// With rotary positions the cache rotates each new query and key at its own position; the training pass
// rotates the whole sequence: the same logits.
TEST(LmSampler, CacheGivesTheLogitsOfTheFullForwardPassWithRope) {
  LmConfig c = test::small_config();
  c.rope = true;
  const LmModel m = test::perturbed_model(c);
  expect_cache_matches_forward(c, m);
}

TEST(LmSampler, SameTokensWhateverTheBatchGrouping) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  const std::vector<SampleRequest> all = make_requests(c, 7);
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_p = 0.9f;
  p.max_new_tokens = 8;
  const std::vector<SampleResult> together = sample(m, all, p);
  std::vector<SampleResult> pieces;
  for (size_t begin = 0; begin < all.size(); begin += 3) {
    const size_t n = std::min<size_t>(3, all.size() - begin);
    for (SampleResult& r : sample(m, std::span(all).subspan(begin, n), p)) pieces.push_back(std::move(r));
  }
  for (size_t i = all.size(); i-- > 0;) {  // one at a time, in reverse order
    const SampleResult alone = sample(m, std::span(all).subspan(i, 1), p)[0];
    EXPECT_EQ(alone.tokens, together[i].tokens);
    EXPECT_EQ(alone.logprobs, together[i].logprobs);  // bit-identical
  }
  bool any_differ = false;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(pieces[i].tokens, together[i].tokens);
    EXPECT_EQ(pieces[i].logprobs, together[i].logprobs);
    EXPECT_EQ(together[i].tokens.size(), 8u);
    any_differ = any_differ || together[i].tokens != together[0].tokens;
  }
  EXPECT_TRUE(any_differ) << "every request sampled the same tokens: the streams are not per request";
  // The returned log-probs are the model's own: forward() over prompt + sample gives them back.
  for (size_t i = 0; i < all.size(); ++i) {
    std::vector<int32_t> seq = all[i].prompt;
    seq.insert(seq.end(), together[i].tokens.begin(), together[i].tokens.end());
    PackedBatch b;
    b.add_sequence(seq);
    const ForwardResult f = m.forward(b);
    const size_t first = all[i].prompt.size() - 1;
    for (size_t k = 0; k < together[i].logprobs.size(); ++k)
      EXPECT_NEAR(together[i].logprobs[k], f.logp[first + k], 1e-4f);
  }
}

TEST(LmSampler, TemperatureZeroIsGreedy) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  std::vector<SampleRequest> r = make_requests(c, 1);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_new_tokens = 6;
  const SampleResult a = sample(m, r, p)[0];
  r[0].stream.seed = 999;  // greedy draws nothing: another stream gives the same tokens
  EXPECT_EQ(sample(m, r, p)[0].tokens, a.tokens);
  std::vector<int32_t> seq = r[0].prompt;
  for (int32_t t : a.tokens) {
    PackedBatch b;
    b.add_sequence(seq);
    const ForwardResult f = m.forward(b);
    Eigen::Index best = 0;
    f.logits.row(b.size() - 1).maxCoeff(&best);
    EXPECT_EQ(t, best);
    seq.push_back(t);
  }
}

TEST(LmSampler, PickTokenEdgeCases) {
  Rng rng(StreamKey{1, 2, 3, StreamRole::kExecute, 0});
  RowVector logits(5);
  logits << 1.0f, 3.0f, 3.0f, -2.0f, 0.5f;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(pick_token(logits, greedy, rng), 1);  // the lower id of two maxima
  SamplingParams tiny_p;
  tiny_p.top_p = 1e-6f;
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(pick_token(logits, tiny_p, rng), 1);  // one token kept: the first max
  // Probabilities 0.4 0.3 0.2 0.1: top_p 0.5 keeps {0, 1}, 0.75 keeps {0, 1, 2}, 1 keeps all.
  RowVector q(4);
  q << std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f);
  auto support = [&](float top_p) {
    SamplingParams p;
    p.top_p = top_p;
    std::vector<int> counts(4, 0);
    for (int i = 0; i < 4000; ++i) ++counts[pick_token(q, p, rng)];
    return counts;
  };
  std::vector<int> half = support(0.5f);
  EXPECT_EQ(half[2] + half[3], 0);
  EXPECT_NEAR(half[0] / 4000.0, 0.4 / 0.7, 0.04);
  std::vector<int> most = support(0.75f);
  EXPECT_GT(most[2], 0);
  EXPECT_EQ(most[3], 0);
  std::vector<int> full = support(1.0f);
  EXPECT_NEAR(full[3] / 4000.0, 0.1, 0.025);
  // A very low temperature is greedy in effect; a high one flattens.
  SamplingParams cold;
  cold.temperature = 1e-3f;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_token(q, cold, rng), 0);
  SamplingParams hot;
  hot.temperature = 100.0f;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 4000; ++i) ++counts[pick_token(q, hot, rng)];
  EXPECT_NEAR(counts[3] / 4000.0, 0.25, 0.04);
}

TEST(LmSampler, TopKKeepsTheKMostLikelyThenTopPAmongThem) {
  Rng rng(StreamKey{4, 5, 6, StreamRole::kExecute, 0});
  // Probabilities 0.4 0.3 0.2 0.1.
  RowVector q(4);
  q << std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f);
  auto counts = [&](int top_k, float top_p) {
    SamplingParams p;
    p.top_k = top_k;
    p.top_p = top_p;
    std::vector<int> n(4, 0);
    for (int i = 0; i < 4000; ++i) ++n[pick_token(q, p, rng)];
    return n;
  };
  EXPECT_EQ(counts(1, 1.0f), (std::vector<int>{4000, 0, 0, 0}));
  const std::vector<int> two = counts(2, 1.0f);
  EXPECT_EQ(two[2] + two[3], 0);
  EXPECT_NEAR(two[0] / 4000.0, 0.4 / 0.7, 0.04);
  // top_p over what top_k kept, renormalised: {0.57, 0.43} reaches 0.55 with the first token alone (over
  // the full distribution, 0.4 would not, and both would be kept).
  EXPECT_EQ(counts(2, 0.55f), (std::vector<int>{4000, 0, 0, 0}));
  const std::vector<int> three = counts(3, 0.75f);  // {0.44, 0.33, 0.22}: the first two reach 0.75
  EXPECT_EQ(three[2] + three[3], 0);
  EXPECT_GT(three[1], 0);
  // Off: 0, -1, and k >= the vocabulary keep every token.
  for (const int off : {0, -1, 4, 100}) EXPECT_NEAR(counts(off, 1.0f)[3] / 4000.0, 0.1, 0.025) << off;
  // Ties: the lower id is kept.
  RowVector tied(3);
  tied << 1.0f, 2.0f, 2.0f;
  SamplingParams one;
  one.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(pick_token(tied, one, rng), 1);
}

TEST(LmSampler, PromptLogprobsAreTheForwardPassOnThePrompt) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  std::vector<SampleRequest> requests = make_requests(c, 2);
  requests[0].prompt = {5, 9, 2, 7, 7, 1};
  requests[0].prompt_logprobs_from = 0;
  requests[1].prompt = {3, 8, 4, 6};
  requests[1].prompt_logprobs_from = 2;
  SamplingParams p;
  p.max_new_tokens = 3;
  p.top_logprobs = 2;
  const std::vector<SampleResult> out = sample(m, requests, p);
  for (size_t r = 0; r < 2; ++r) {
    const std::vector<int32_t>& prompt = requests[r].prompt;
    PackedBatch batch;
    batch.add_sequence(prompt);
    const ForwardResult f = m.forward(batch);
    const size_t from = static_cast<size_t>(requests[r].prompt_logprobs_from);
    ASSERT_EQ(out[r].prompt_logprobs.size(), prompt.size() - from) << r;
    ASSERT_EQ(out[r].prompt_top.size(), prompt.size() - from) << r;
    for (size_t t = from; t < prompt.size(); ++t) {
      const float value = out[r].prompt_logprobs[t - from];
      if (t == 0) {  // no context
        EXPECT_TRUE(std::isnan(value));
        EXPECT_TRUE(out[r].prompt_top[0].empty());
        continue;
      }
      EXPECT_NEAR(value, f.logp[static_cast<Eigen::Index>(t - 1)], 2e-5f) << r << " " << t;
      ASSERT_EQ(out[r].prompt_top[t - from].size(), 2u);
      EXPECT_GE(out[r].prompt_top[t - from][0].second, value);
    }
  }
  // Without the request: none; from the prompt's length on or below -1: refused.
  EXPECT_TRUE(sample(m, make_requests(c, 1), p)[0].prompt_logprobs.empty());
  for (const int bad : {6, 7, -2}) {
    requests[0].prompt_logprobs_from = bad;
    EXPECT_THROW(sample(m, requests, p), std::invalid_argument) << bad;
  }
}

TEST(LmSampler, StopIdsAndLimits) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  std::vector<SampleRequest> r = make_requests(c, 1);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_new_tokens = 6;
  const SampleResult free = sample(m, r, p)[0];
  EXPECT_EQ(free.finish, FinishReason::kLength);
  p.stop_ids = {free.tokens[2]};
  const SampleResult stopped = sample(m, r, p)[0];
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  const auto first = std::find(free.tokens.begin(), free.tokens.end(), free.tokens[2]) - free.tokens.begin();
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(free.tokens.begin(), free.tokens.begin() + first + 1));
  p.stop_ids.clear();
  p.max_new_tokens = 0;
  EXPECT_TRUE(sample(m, r, p)[0].tokens.empty());
  p.max_new_tokens = 100;  // the prompt (3 tokens) + new tokens stop at max_positions (16)
  const SampleResult ctx = sample(m, r, p)[0];
  EXPECT_EQ(ctx.finish, FinishReason::kContext);
  EXPECT_EQ(ctx.tokens.size(), 16u - 3u + 1u);
}

// An observer sees every round as it is sampled (the tokens so far, which sequences are finished: a stop
// id, the token limit, the context), changes nothing, and stops sampling when it returns false.
TEST(LmSampler, AnObserverSeesEachRoundAndCanStopIt) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  const std::vector<SampleRequest> r = make_requests(c, 3);
  SamplingParams p;
  p.max_new_tokens = 8;
  const std::vector<SampleResult> plain = sample(m, r, p);
  p.stop_ids = {plain[1].tokens[2]};  // sequence 1 stops early; the others may too
  const std::vector<SampleResult> expected = sample(m, r, p);
  std::vector<std::vector<int32_t>> seen(3);
  std::vector<int> finished_at(3, -1);
  int rounds = 0;
  const std::vector<SampleResult> observed =
      sample(m, r, p, [&](int step, std::span<const SampleResult> so_far, std::span<const char> finished) {
        EXPECT_EQ(step, rounds++);
        for (size_t k = 0; k < 3; ++k) {
          if (so_far[k].tokens.size() != static_cast<size_t>(step) + 1) continue;  // finished before
          EXPECT_EQ(finished_at[k], -1) << k;
          seen[k].push_back(so_far[k].tokens.back());
          if (finished[k]) finished_at[k] = step;
        }
        return true;
      });
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(observed[k].tokens, expected[k].tokens) << k;
    EXPECT_EQ(observed[k].logprobs, expected[k].logprobs) << k;
    EXPECT_EQ(seen[k], expected[k].tokens) << "each token seen in its round";
    EXPECT_EQ(finished_at[k], static_cast<int>(expected[k].tokens.size()) - 1)
        << "finished in its last round";
  }
  EXPECT_LT(expected[1].tokens.size(), 8u);
  // Stopped after the second round: two tokens each, the rest never sampled.
  const std::vector<SampleResult> cut = sample(
      m, r, p, [](int step, std::span<const SampleResult>, std::span<const char>) { return step < 1; });
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(cut[k].tokens,
              std::vector<int32_t>(expected[k].tokens.begin(),
                                   expected[k].tokens.begin() +
                                       std::min<long>(2, static_cast<long>(expected[k].tokens.size()))));
  }
}

// A stop string that spans several tokens ends sampling at the token that completes its first occurrence,
// at temperature 0 and when sampling (the stopped run is a prefix of the free run: same stream).
TEST(LmSampler, MultiTokenStopStrings) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  const ByteTokenizer bytes;  // id i < 256 decodes to the byte i
  for (float temperature : {0.0f, 1.0f}) {
    std::vector<SampleRequest> r = make_requests(c, 1);
    SamplingParams p;
    p.temperature = temperature;
    p.max_new_tokens = 12;
    p.tokenizer = &bytes;
    const SampleResult free = sample(m, r, p)[0];
    ASSERT_EQ(free.tokens.size(), 12u);
    ASSERT_EQ(free.text.size(), 12u);
    const std::string stop = free.text.substr(4, 3);  // tokens 4, 5, 6
    const size_t at = free.text.find(stop);
    p.stop_strings = {"\x7f\x7f never", stop};
    const SampleResult stopped = sample(m, r, p)[0];
    EXPECT_EQ(stopped.finish, FinishReason::kStop);
    EXPECT_EQ(stopped.stop_string, 1);
    EXPECT_EQ(stopped.stop_offset, static_cast<int64_t>(at));
    EXPECT_EQ(stopped.tokens, std::vector<int32_t>(free.tokens.begin(), free.tokens.begin() + at + 3));
    EXPECT_EQ(stopped.logprobs, std::vector<float>(free.logprobs.begin(), free.logprobs.begin() + at + 3));
    // Of two stop strings the one that occurs first wins, whatever their order.
    p.stop_strings = {stop, free.text.substr(1, 2)};
    const SampleResult earlier = sample(m, r, p)[0];
    EXPECT_EQ(earlier.stop_string, 1);
    EXPECT_LE(earlier.tokens.size(), 3u);
    // A stop id wins over a stop string completed by the same token.
    p.stop_strings = {free.text.substr(0, 1)};
    p.stop_ids = {free.tokens[0]};
    const SampleResult by_id = sample(m, r, p)[0];
    EXPECT_EQ(by_id.tokens.size(), 1u);
    EXPECT_EQ(by_id.stop_string, -1);
  }
  SamplingParams no_tokenizer;
  no_tokenizer.stop_strings = {"x"};
  EXPECT_THROW(sample(m, make_requests(c, 1), no_tokenizer), std::invalid_argument);
  no_tokenizer.tokenizer = &bytes;
  no_tokenizer.stop_strings = {""};
  EXPECT_THROW(sample(m, make_requests(c, 1), no_tokenizer), std::invalid_argument);
}

TEST(LmSampler, TopLogprobsAreTheModelsBestTokens) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_new_tokens = 5;
  p.top_logprobs = 3;
  const SampleResult r = sample(m, make_requests(c, 1), p)[0];
  ASSERT_EQ(r.top.size(), 5u);
  for (size_t i = 0; i < r.top.size(); ++i) {
    ASSERT_EQ(r.top[i].size(), 3u);
    EXPECT_EQ(r.top[i][0].first, r.tokens[i]);  // greedy picks the best
    EXPECT_EQ(r.top[i][0].second, r.logprobs[i]);
    EXPECT_GE(r.top[i][0].second, r.top[i][1].second);
    EXPECT_GE(r.top[i][1].second, r.top[i][2].second);
  }
  p.top_logprobs = -1;
  EXPECT_THROW(sample(m, make_requests(c, 1), p), std::invalid_argument);
}

TEST(LmSampler, BadParametersAndPromptsAreRejected) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  std::vector<SampleRequest> r = make_requests(c, 1);
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(sample(m, r, p), std::invalid_argument);
  p = SamplingParams{};
  p.temperature = -1.0f;
  EXPECT_THROW(sample(m, r, p), std::invalid_argument);
  p = SamplingParams{};
  p.max_new_tokens = -1;
  EXPECT_THROW(sample(m, r, p), std::invalid_argument);
  p = SamplingParams{};
  r[0].prompt = {};
  EXPECT_THROW(sample(m, r, p), std::invalid_argument);
  r[0].prompt = {1, 37};
  EXPECT_THROW(sample(m, r, p), std::invalid_argument);
}

}  // namespace
}  // namespace crl::lm
