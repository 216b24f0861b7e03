// policies/lm model: shapes, initialisation, batch validation, packing independence and finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <span>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "lm_test_util.h"

namespace crl::lm {
namespace {

// Central differences of the test loss at each picked parameter against the backward's gradient.
void expect_finite_differences(LmModel& m, const PackedBatch& b, const test::LossInputs& in,
                               const std::vector<float>& grad, std::span<const int64_t> picks) {
  for (int64_t i : picks) {
    const float keep = m.parameters()[i];
    const float h = 1e-2f * std::max(1.0f, std::abs(keep));
    std::vector<float> unused;
    m.parameters()[i] = keep + h;
    const double up = test::test_loss(b, m.forward(b), in, unused);
    m.parameters()[i] = keep - h;
    const double down = test::test_loss(b, m.forward(b), in, unused);
    m.parameters()[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(grad[i], numeric, 2e-2 * std::abs(numeric) + 2e-4) << "parameter " << i;
  }
}

TEST(LmModel, DefaultSizeIsAboutAMillionParameters) {
  const LmModel m;
  EXPECT_GT(m.size(), 800'000);
  EXPECT_LT(m.size(), 1'200'000);
  EXPECT_EQ(m.layout().size(), m.layout().value_b() + 1);
}

TEST(LmModel, InitialisationIsDeterministicAndTheValueHeadStartsAtZero) {
  const LmConfig c = test::small_config();
  LmModel a(c), b(c), other(c);
  a.initialize(3);
  b.initialize(3);
  other.initialize(4);
  EXPECT_EQ(a.parameters(), b.parameters());
  EXPECT_NE(a.parameters(), other.parameters());
  const PackedBatch batch = test::make_batch(c, {6, 3});
  const ForwardResult f = a.forward(batch);
  for (float v : f.values) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(a.parameters()[a.layout().block(1).norm2], 1.0f);
}

// Every linear layer starts at N(0, 1 / (3 fan_in)) (PyTorch nn.Linear's variance), embeddings at 0.02:
// the scale at which a 32-64-wide model learns copy drills (model.cpp). GPT-2's 0.02 everywhere stalled.
TEST(LmModel, LinearLayersStartAtTheFanInScale) {
  LmConfig c;
  c.vocab = 256;
  c.d_model = 64;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 256;
  c.max_positions = 64;
  LmModel m(c);
  m.initialize(5);
  const auto stddev = [&](int64_t offset, int64_t n) {
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum += m.parameters()[offset + i];
      squares += double{m.parameters()[offset + i]} * m.parameters()[offset + i];
    }
    return std::sqrt(squares / n - (sum / n) * (sum / n));
  };
  const double d = 1.0 / std::sqrt(3.0 * 64), ff = 1.0 / std::sqrt(3.0 * 256);
  for (int b = 0; b < c.layers; ++b) {
    const BlockLayout l = m.layout().block(b);
    EXPECT_NEAR(stddev(l.wqkv, 64 * 192), d, 0.03 * d) << b;
    EXPECT_NEAR(stddev(l.wo, 64 * 64), d, 0.05 * d) << b;
    EXPECT_NEAR(stddev(l.w1, 64 * 256), d, 0.03 * d) << b;
    EXPECT_NEAR(stddev(l.w2, 256 * 64), ff, 0.03 * ff) << b;
  }
  EXPECT_NEAR(stddev(m.layout().tok_emb(), 256 * 64), 0.02, 0.001);
}

TEST(LmModel, MalformedBatchesAreRejectedWithTheirField) {
  const LmModel m(test::small_config());
  PackedBatch b = test::make_batch(m.config(), {4});
  b.tokens[2] = 37;
  EXPECT_THROW(
      {
        try {
          m.forward(b);
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("token 2 is 37"), std::string::npos) << e.what();
          throw;
        }
      },
      std::invalid_argument);
  EXPECT_THROW(m.forward(test::make_batch(m.config(), {17})), std::invalid_argument);  // > max_positions
  PackedBatch bad_offsets = test::make_batch(m.config(), {3});
  bad_offsets.offsets.back() = 2;
  EXPECT_THROW(m.forward(bad_offsets), std::invalid_argument);
  PackedBatch bad_target = test::make_batch(m.config(), {3});
  bad_target.targets[0] = -2;
  EXPECT_THROW(m.forward(bad_target), std::invalid_argument);
  const PackedBatch ok = test::make_batch(m.config(), {3});
  const ForwardResult f = m.forward(ok);
  std::vector<float> short_grad(2, 0.0f);
  EXPECT_THROW(m.backward(ok, f, short_grad, short_grad), std::invalid_argument);
}

// A sequence's outputs do not depend on which other sequences share its batch (no cross-sequence attention).
TEST(LmModel, SequencesInOneBatchDoNotSeeEachOther) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  const PackedBatch both = test::make_batch(c, {7, 5});
  PackedBatch second;
  second.add_sequence(std::span<const int32_t>(both.tokens).subspan(7, 5));
  const ForwardResult fb = m.forward(both), fs = m.forward(second);
  for (int t = 0; t < 5; ++t) {
    EXPECT_NEAR(fb.logp[7 + t], fs.logp[t], 1e-5f);
    EXPECT_NEAR(fb.values[7 + t], fs.values[t], 1e-5f);
  }
}

// Central differences of the test loss (computed in double from the float forward) for a sample of
// parameters in every kind of tensor; a check that does not need PyTorch.
TEST(LmModel, GradientsMatchFiniteDifferences) {
  const LmConfig c = test::small_config();
  LmModel m = test::perturbed_model(c);
  const PackedBatch b = test::make_batch(c, {6, 9, 2});
  const test::LossInputs in = test::make_loss_inputs(b.size());
  const ForwardResult f = m.forward(b);
  std::vector<float> dlogp;
  test::test_loss(b, f, in, dlogp);
  const std::vector<float> grad = m.backward(b, f, dlogp, in.dvalue);
  const ParamLayout& l = m.layout();
  const BlockLayout b0 = l.block(0), b1 = l.block(1);
  const int64_t picks[] = {l.tok_emb() + int64_t{b.tokens[3]} * c.d_model + 2,
                           l.pos_emb() + 1 * c.d_model + 4,
                           b0.norm1 + 3,
                           b0.wqkv + 2,  // a query weight
                           b1.wqkv + 3 * 48 + 5,
                           b0.wqkv + 17,
                           b0.wqkv + 16 * 3 * 4 + 20,
                           b1.wqkv + 40,
                           b0.wo + 9,
                           b1.norm2 + 1,
                           b1.w1 + 30,
                           b0.w2 + 50,
                           l.norm_f() + 5,
                           l.value_w() + 2,
                           l.value_b()};
  expect_finite_differences(m, b, in, grad, picks);
}

// Rotary positions: the backward's inverse rotation of the query and key gradients, checked on query and key
// weights of both blocks; absolute positions are not used (their gradient is exactly 0).
TEST(LmModel, RopeGradientsMatchFiniteDifferences) {
  LmConfig c = test::small_config();
  c.rope = true;
  LmModel m = test::perturbed_model(c);
  const PackedBatch b = test::make_batch(c, {6, 9, 2});
  const test::LossInputs in = test::make_loss_inputs(b.size());
  const ForwardResult f = m.forward(b);
  std::vector<float> dlogp;
  test::test_loss(b, f, in, dlogp);
  const std::vector<float> grad = m.backward(b, f, dlogp, in.dvalue);
  const ParamLayout& l = m.layout();
  const BlockLayout b0 = l.block(0), b1 = l.block(1);
  for (int64_t i = 0; i < int64_t{c.max_positions} * c.d_model; ++i) ASSERT_EQ(grad[l.pos_emb() + i], 0.0f);
  // wqkv is [d x 3d]: column j < 16 a query, 16 <= j < 32 a key (head_dim 4: pairs (0, 2) and (1, 3)).
  const int64_t picks[] = {l.tok_emb() + int64_t{b.tokens[3]} * c.d_model + 2,
                           b0.wqkv + 2,
                           b0.wqkv + 3 * 16 * 5 + 1,
                           b0.wqkv + 3 * 16 * 2 + 16 + 3,
                           b0.wqkv + 3 * 16 * 7 + 16 + 6,
                           b1.wqkv + 3 * 16 * 4 + 8,
                           b1.wqkv + 3 * 16 * 9 + 16 + 13,
                           b0.wo + 9,
                           b1.w1 + 30};
  expect_finite_differences(m, b, in, grad, picks);
}

// Rotary attention sees relative offsets only: a query/key score depends on the two positions' distance,
// position 0 is the identity, and the inverse rotation undoes the rotation.
TEST(LmModel, RopeScoresDependOnTheOffsetOnly) {
  const float q[4] = {0.3f, -1.2f, 0.7f, 0.25f}, k[4] = {-0.4f, 0.9f, 1.1f, -0.6f};
  auto score = [&](int pq, int pk) {
    float a[4], b[4];
    std::copy(q, q + 4, a);
    std::copy(k, k + 4, b);
    rope_rotate(a, 4, pq);
    rope_rotate(b, 4, pk);
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
  };
  EXPECT_NEAR(score(5, 2), score(105, 102), 1e-4f);
  EXPECT_NEAR(score(0, 0), q[0] * k[0] + q[1] * k[1] + q[2] * k[2] + q[3] * k[3], 1e-6f);
  EXPECT_GT(std::abs(score(5, 2) - score(5, 4)), 1e-3f);
  float v[4] = {1, 2, 3, 4};
  rope_rotate(v, 4, 37);
  rope_rotate(v, 4, 37, true);
  EXPECT_NEAR(v[0], 1.0f, 1e-5f);
  EXPECT_NEAR(v[3], 4.0f, 1e-5f);
}

// The model's table of rotations (computed once) rotates with the same bits as rope_rotate, forward and
// back, at every position up to max_positions - 1.
TEST(LmModel, RopeTableRotatesWithTheSameBitsAsTheAngles) {
  const RopeTable table(8, 300);
  for (const int position : {0, 1, 2, 37, 150, 299}) {
    for (const bool inverse : {false, true}) {
      float a[8] = {0.3f, -1.2f, 0.7f, 0.25f, 2.5f, -0.01f, 1e-3f, -7.0f}, b[8];
      std::copy(a, a + 8, b);
      rope_rotate(a, 8, position, inverse);
      table.rotate(b, position, inverse);
      for (int i = 0; i < 8; ++i) EXPECT_EQ(a[i], b[i]) << position << " " << inverse << " " << i;
    }
  }
}

#if defined(__GLIBC__)
// A model keeps the process's freed blocks in the heap (keep_freed_memory): a 64 MB block (above glibc's
// largest dynamic mmap threshold, 32 MB, so served by mmap and unmapped on free without it) stays in the
// heap's free space after free. Without it every training pass page-faults its activations afresh (3.6x
// slower SFT, measured).
TEST(LmModel, FreedMemoryStaysInTheHeap) {
#if defined(__SANITIZE_ADDRESS__) || defined(CRL_TSAN)
  GTEST_SKIP() << "the sanitizer's allocator replaces glibc's heap, which this test measures";
#endif
  const LmModel m(test::small_config());
  const size_t n = size_t{64} << 20;
  void* p = std::malloc(n);
  ASSERT_NE(p, nullptr);
  static_cast<volatile char*>(p)[n - 1] = 1;
  std::free(p);
  EXPECT_GE(mallinfo2().fordblks, n);
}
#endif

TEST(LmModel, RopeNeedsAnEvenHeadDim) {
  LmConfig c = test::small_config();
  c.rope = true;
  c.heads = 16;  // head_dim 1
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace crl::lm
