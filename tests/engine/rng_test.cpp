#include "engine/rng.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <set>

#if defined(CRL_HAVE_CUDA)
#include "engine/cuda/device.h"
#endif

namespace crl {
namespace {

// Known-answer vectors of Philox4x32-10 from Random123 (kat_vectors).
TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Case {
    PhiloxCounter ctr;
    PhiloxKey key;
    std::array<uint32_t, 4> expected;
  };
  const Case cases[] = {
      {{{0, 0, 0, 0}}, {{0, 0}}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       {{0xffffffff, 0xffffffff}},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       {{0xa4093822, 0x299f31d0}},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Case& c : cases) {
    const PhiloxCounter out = philox4x32_10(c.ctr, c.key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], c.expected[i]) << "word " << i;
  }
}

// Pins the first outputs of a keyed stream: if the key derivation or the buffering ever changes, every
// recorded trajectory would change with it, so this must fail loudly.
TEST(Rng, PinnedFirstOutputsOfAStream) {
  Rng rng(StreamKey{7, 42, 3, StreamRole::kExecute, 5});
  std::array<uint32_t, 6> got{};
  for (auto& x : got) x = rng.next_u32();
  Rng again(StreamKey{7, 42, 3, StreamRole::kExecute, 5});
  for (uint32_t x : got) EXPECT_EQ(again.next_u32(), x);
  const PhiloxCounter first = Rng(StreamKey{7, 42, 3, StreamRole::kExecute, 5}).block(0);
  EXPECT_EQ(got[0], first.v[0]);
  EXPECT_EQ(got[3], first.v[3]);
  // The pinned values (computed once with this implementation, which matches Random123 above).
  const std::array<uint32_t, 6> pinned = {0xfaa83feb, 0x463007b5, 0xba1febbb,
                                          0xfc9151fc, 0xaec1bc7c, 0xdb85d6ff};
  EXPECT_EQ(got, pinned);
}

TEST(Rng, StreamsDifferInEveryKeyComponent) {
  const StreamKey base{1, 2, 3, StreamRole::kExecute, 4};
  std::set<uint64_t> firsts;
  auto first = [](StreamKey k) { return Rng(k).next_u64(); };
  firsts.insert(first(base));
  StreamKey k = base;
  k.seed = 9;
  firsts.insert(first(k));
  k = base;
  k.task = 9;
  firsts.insert(first(k));
  k = base;
  k.sample = 9;
  firsts.insert(first(k));
  k = base;
  k.role = StreamRole::kSummarize;
  firsts.insert(first(k));
  k = base;
  k.ordinal = 9;
  firsts.insert(first(k));
  EXPECT_EQ(firsts.size(), 6u);
}

TEST(Rng, UniformIsInRangeWithTheRightMoments) {
  Rng rng(StreamKey{11, 0, 0, StreamRole::kLearner, 0});
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum_sq += u * u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sum_sq / n - (sum / n) * (sum / n), 1.0 / 12, 0.002);
}

TEST(Rng, UniformIntIsUnbiasedForAwkwardRanges) {
  Rng rng(StreamKey{12, 0, 0, StreamRole::kLearner, 0});
  const uint32_t n = 7;
  std::array<int, 7> counts{};
  const int draws = 70000;
  for (int i = 0; i < draws; ++i) {
    const uint32_t v = rng.uniform_int(n);
    ASSERT_LT(v, n);
    ++counts[v];
  }
  double chi2 = 0;
  for (int c : counts) chi2 += (c - draws / 7.0) * (c - draws / 7.0) / (draws / 7.0);
  EXPECT_LT(chi2, 22.5);  // p = 0.001 for 6 degrees of freedom
}

TEST(Rng, CategoricalFollowsSoftmaxAndNeverPicksMinusInfinity) {
  Rng rng(StreamKey{13, 0, 0, StreamRole::kLearner, 0});
  const double logits[] = {std::log(1.0), std::log(2.0), -INFINITY, std::log(7.0)};
  std::array<int, 4> counts{};
  const int draws = 100000;
  for (int i = 0; i < draws; ++i) ++counts[rng.categorical(logits, 4)];
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[0] / double(draws), 0.1, 0.005);
  EXPECT_NEAR(counts[1] / double(draws), 0.2, 0.006);
  EXPECT_NEAR(counts[3] / double(draws), 0.7, 0.006);
  // Huge logits do not overflow.
  const double big[] = {1000.0, 1000.0};
  int first = 0;
  for (int i = 0; i < 10000; ++i) first += rng.categorical(big, 2) == 0;
  EXPECT_NEAR(first / 10000.0, 0.5, 0.03);
}

TEST(Rng, BernoulliRate) {
  Rng rng(StreamKey{14, 0, 0, StreamRole::kLearner, 0});
  int hits = 0;
  for (int i = 0; i < 100000; ++i) hits += rng.bernoulli(0.3);
  EXPECT_NEAR(hits / 100000.0, 0.3, 0.005);
}

TEST(RngCuda, DeviceGeneratesTheCpuNumbers) {
#if defined(CRL_HAVE_CUDA)
  std::string why;
  if (!cuda::cuda_device_available(&why)) GTEST_SKIP() << "CUDA built but no device here: " << why;
  const StreamKey key{7, 42, 3, StreamRole::kExecute, 5};
  const uint64_t count = 1 << 20;
  const std::vector<PhiloxCounter> device = cuda::philox_blocks(key, count);
  const Rng cpu(key);
  for (uint64_t i = 0; i < count; ++i) {
    const PhiloxCounter expected = cpu.block(i);
    for (int w = 0; w < 4; ++w) ASSERT_EQ(device[i].v[w], expected.v[w]) << "block " << i << " word " << w;
  }
#else
  GTEST_SKIP() << "built without CUDA (nvcc not found or CRL_CUDA=OFF)";
#endif
}

}  // namespace
}  // namespace crl
