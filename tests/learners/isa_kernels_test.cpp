// Every instruction-set copy of the CPU loss kernel (generic, AVX2, AVX-512: cpu/loss_kernel.h) against the
// generic one: the same bits for the losses and both gradients, for every switch of the learner, for
// segments shorter and longer than a kernel block, and with micro-batch ranges that cut segments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/rng.h"
#include "learners/cpu/cpu_learner.h"
#include "learners/cpu/kernel_exp.h"
#include "tests/learners/bit_equality.h"
#include "tests/learners/random_batch.h"

namespace crl::learners {
namespace {

using testing::expect_same;
using testing::same_bits;
using testing::Variant;
using testing::variants;

void check_batch(const Batch& b, const std::string& label) {
  const std::vector<cpu::Isa> isas = cpu::supported_isas();
  ASSERT_EQ(isas.front(), cpu::Isa::kGeneric);
  for (const Variant& v : variants()) {
    Advantages adv;
    cpu::compute_advantages(b, v.options, adv);
    const LossNormalizer norm = cpu::make_normalizer(b, v.options);
    // Whole batch, and a range that starts and ends inside segments.
    const int64_t n = b.num_tokens();
    for (const TokenRange range : {TokenRange{0, n}, TokenRange{n / 3, n - n / 5}}) {
      Gradients want_grads;
      want_grads.resize(n);
      const LossResult want =
          cpu::compute_losses(b, adv, norm, v.options, range, &want_grads, cpu::Isa::kGeneric);
      for (const cpu::Isa isa : isas) {
        const std::string what = label + ", " + v.name + ", " + std::string(cpu::isa_name(isa)) + ", [" +
                                 std::to_string(range.begin) + ", " + std::to_string(range.end) + ")";
        Gradients grads;
        grads.resize(n);
        expect_same(cpu::compute_losses(b, adv, norm, v.options, range, &grads, isa), want, what);
        EXPECT_TRUE(same_bits(grads.logprobs, want_grads.logprobs)) << what;
        EXPECT_TRUE(same_bits(grads.values, want_grads.values)) << what;
        expect_same(cpu::compute_losses(b, adv, norm, v.options, range, nullptr, isa), want,
                    what + " (no grads)");
      }
    }
  }
}

TEST(LossKernelIsaTest, EveryCopyGivesTheGenericBitsOnShortSegments) {
  for (uint64_t seed = 0; seed < 20; ++seed)
    check_batch(testing::random_batch(500 + seed), "seed " + std::to_string(seed));
}

TEST(LossKernelIsaTest, EveryCopyGivesTheGenericBitsOnSegmentsLongerThanABlock) {
  testing::RandomBatchShape shape;
  shape.max_segment_tokens = 1500;  // several 256-token kernel blocks per segment, and partial last blocks
  shape.rollouts = 6;
  for (uint64_t seed = 0; seed < 4; ++seed)
    check_batch(testing::random_batch(900 + seed, shape), "long " + std::to_string(seed));
}

TEST(LossKernelIsaTest, EveryCopyGivesTheGenericBitsWithoutLogprobs) {
  testing::RandomBatchShape shape;
  shape.with_logprobs = false;
  check_batch(testing::random_batch(41, shape), "no log-probs");
}

// The kernel's own exponential (the importance ratio and the k3 KL) against the C library's long double
// one: within 2 ulp over the whole clamped range, near 0 (ratios of nearly equal probabilities) and at the
// ends; exact at 0.
TEST(LossKernelExpTest, WithinTwoUlpOfTheLibraryExponential) {
  Rng rng(StreamKey{11, 0, 0, StreamRole::kLearner, 0});
  double worst = 0.0, worst_x = 0.0;
  auto check = [&](double x) {
    const double got = cpu::kernel_exp(cpu::splat(x))[0];
    const long double want = std::exp(static_cast<long double>(x));
    const double rounded = static_cast<double>(want);
    const double ulp = std::nextafter(rounded, HUGE_VAL) - rounded;
    const double error = static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
    if (error > worst) {
      worst = error;
      worst_x = x;
    }
  };
  for (int i = 0; i < 200000; ++i) {
    check(-708.0 + 1417.0 * rng.uniform());
    check(4.0 * rng.uniform() - 2.0);
    check(1e-3 * (rng.uniform() - 0.5));
  }
  for (const double x : {-708.0, 709.0, -707.999, 708.999, 1e-300, -1e-300, std::log(2.0) / 16.0}) check(x);
  EXPECT_LE(worst, 2.0) << "worst error " << worst << " ulp at x = " << worst_x;
  EXPECT_EQ(cpu::kernel_exp(cpu::splat(0.0))[0], 1.0);
  // Outside the range the input is clamped (no infinities, no subnormals).
  EXPECT_EQ(cpu::kernel_exp(cpu::splat(1e6))[0], cpu::kernel_exp(cpu::splat(709.0))[0]);
  EXPECT_EQ(cpu::kernel_exp(cpu::splat(-1e6))[0], cpu::kernel_exp(cpu::splat(-708.0))[0]);
}

TEST(LossKernelIsaTest, TheDefaultPathIsTheWidestCopy) {
  const Batch b = testing::random_batch(77);
  const LearnerOptions o;
  Advantages adv;
  cpu::compute_advantages(b, o, adv);
  const LossNormalizer norm = cpu::make_normalizer(b, o);
  const TokenRange all{0, b.num_tokens()};
  expect_same(cpu::compute_losses(b, adv, norm, o, all, nullptr),
              cpu::compute_losses(b, adv, norm, o, all, nullptr, cpu::supported_isas().back()), "default");
}

}  // namespace
}  // namespace crl::learners
