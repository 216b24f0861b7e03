// policies/lm model: shapes, initialisation, batch validation, packing independence and finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "lm_test_util.h"

namespace crl::lm {
namespace {

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

}  // namespace
}  // namespace crl::lm
