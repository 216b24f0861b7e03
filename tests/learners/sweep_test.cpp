// The CPU estimator's lane sweep and the fused learner step (learners/cpu/gae_sweep.h, sweep_kernel.h):
//  * the lanes give exactly the bits of the plain serial sweep (one segment at a time, newest token first),
//    written out below from the definition, for every switch, every kernel copy and every batch shape,
//    including batches larger than the caches;
//  * the fused step (cpu::compute_step, Learner::step) gives exactly the bits of compute_advantages +
//    make_normalizer + compute_losses.
#include <gtest/gtest.h>

#include <cstring>

#include "learners/cpu/cpu_learner.h"
#include "learners/learner.h"
#include "tests/learners/bit_equality.h"
#include "tests/learners/random_batch.h"

namespace crl::learners {
namespace {

using testing::expect_same;
using testing::first_difference;
using testing::same_bits;
using testing::Variant;
using testing::variants;

// Steps 3-5 of learner.h as the spec reads, one segment at a time, newest token first; the segment-level
// numbers (lambda_s, the correction factor) are taken from the estimator's own output, which other tests
// check against the zero-critic reference.
void serial_sweep(const Batch& b, const LearnerOptions& o, const Advantages& seg, std::vector<double>& adv,
                  std::vector<double>& ret) {
  adv.assign(b.num_tokens(), 0.0);
  ret.assign(b.num_tokens(), 0.0);
  for (int64_t r = 0; r < b.num_rollouts(); ++r) {
    const double reward = b.rewards[r];
    bool has_next = false;
    double next_first_value = 0.0;
    for (int64_t s = b.rollout_offsets[r + 1] - 1; s >= b.rollout_offsets[r]; --s) {
      const double gl = o.gamma * seg.lambda[s];
      const double factor = seg.factor[s];
      const double ret_scale = o.critic_target == CriticTarget::kCorrected ? factor : 1.0;
      const double corr0 =
          o.critic_target == CriticTarget::kStitched && has_next ? o.gamma * next_first_value - reward : 0.0;
      const bool zero = o.positive_only && reward <= 0.0;
      bool started = false;
      double a = 0.0, next_v = 0.0, corr = 0.0;
      for (int64_t t = b.segment_offsets[s + 1] - 1; t >= b.segment_offsets[s]; --t) {
        const double v = b.values[t];
        if (!b.critic_mask[t]) {
          adv[t] = 0.0;
          ret[t] = v;
          continue;
        }
        if (started) {
          a = (o.gamma * next_v - v) + gl * a;
          corr *= gl;
        } else {
          a = reward - v;
          corr = corr0;
          started = true;
        }
        next_v = v;
        adv[t] = zero ? 0.0 : factor * a;
        ret[t] = ret_scale * a + corr + v;
      }
      for (int64_t t = b.segment_offsets[s]; t < b.segment_offsets[s + 1]; ++t) {
        if (b.critic_mask[t]) {
          has_next = true;
          next_first_value = b.values[t];
          break;
        }
      }
    }
  }
}

// Every check on one batch: lanes vs serial sweep, and the fused step vs the three calls, on every kernel
// copy.
void check_batch(const Batch& b, const std::string& label, const std::vector<Variant>& which = variants()) {
  for (const Variant& v : which) {
    for (const cpu::Isa isa : cpu::supported_isas()) {
      const std::string what = label + ", " + v.name + ", " + std::string(cpu::isa_name(isa));
      Advantages adv;
      cpu::compute_advantages(b, v.options, adv, isa);
      if (!v.options.whiten_advantages) {
        std::vector<double> want_adv, want_ret;
        serial_sweep(b, v.options, adv, want_adv, want_ret);
        EXPECT_TRUE(same_bits(adv.advantages, want_adv))
            << what << ": advantages differ from the serial sweep at "
            << first_difference(adv.advantages, want_adv);
        EXPECT_TRUE(same_bits(adv.returns, want_ret)) << what << ": returns differ from the serial sweep at "
                                                      << first_difference(adv.returns, want_ret);
      }
      const LossNormalizer norm = cpu::make_normalizer(b, v.options);
      Gradients grads;
      grads.resize(b.num_tokens());
      const LossResult want =
          cpu::compute_losses(b, adv, norm, v.options, TokenRange{0, b.num_tokens()}, &grads, isa);

      Advantages step_adv;
      LossNormalizer step_norm;
      Gradients step_grads;
      const LossResult got = cpu::compute_step(b, v.options, step_adv, step_norm, &step_grads, isa);
      expect_same(got, want, what + ": step");
      EXPECT_TRUE(same_bits(step_adv.advantages, adv.advantages))
          << what << ": step advantages at " << first_difference(step_adv.advantages, adv.advantages);
      EXPECT_TRUE(same_bits(step_adv.returns, adv.returns)) << what;
      EXPECT_TRUE(same_bits(step_grads.logprobs, grads.logprobs))
          << what << ": step log-prob gradients at " << first_difference(step_grads.logprobs, grads.logprobs);
      EXPECT_TRUE(same_bits(step_grads.values, grads.values)) << what;
      EXPECT_TRUE(same_bits(step_norm.actor_scale, norm.actor_scale)) << what;
      EXPECT_TRUE(same_bits(step_norm.critic_scale, norm.critic_scale)) << what;
      EXPECT_EQ(step_adv.n_after, adv.n_after) << what;
      EXPECT_TRUE(same_bits(step_adv.factor, adv.factor)) << what;

      // Without gradients, only the losses.
      Advantages again;
      LossNormalizer again_norm;
      expect_same(cpu::compute_step(b, v.options, again, again_norm, nullptr, isa), want,
                  what + ": no gradients");
    }
  }
}

TEST(LearnerSweepTest, LanesAndFusedStepMatchTheSerialDefinitionOnShortSegments) {
  for (uint64_t seed = 0; seed < 12; ++seed) {
    testing::RandomBatchShape shape;
    shape.sampled_share = seed % 2 ? 0.7 : 0.2;
    check_batch(testing::random_batch(3000 + seed, shape), "seed " + std::to_string(seed));
  }
}

TEST(LearnerSweepTest, LanesAndFusedStepMatchOnLongAndUnevenSegments) {
  // Segments of 0 to 1500 tokens: lanes finish at different times, blocks cut segments, empty segments.
  testing::RandomBatchShape shape;
  shape.max_segment_tokens = 1500;
  shape.rollouts = 6;
  for (uint64_t seed = 0; seed < 4; ++seed)
    check_batch(testing::random_batch(4000 + seed, shape), "long " + std::to_string(seed));
  shape.with_logprobs = false;
  check_batch(testing::random_batch(4100, shape), "long, no log-probs");
}

TEST(LearnerSweepTest, FewerSegmentsThanLanes) {
  // One to three non-empty segments: the sweep never fills its lanes.
  for (int rollouts = 1; rollouts <= 3; ++rollouts) {
    testing::RandomBatchShape shape;
    shape.rollouts = rollouts;
    shape.max_segments = 1;
    shape.max_segment_tokens = 700;
    check_batch(testing::random_batch(5000 + rollouts, shape), std::to_string(rollouts) + " segments");
  }
  Batch empty;
  empty.begin_rollout(1.0);
  empty.add_segment(SegmentKind::kExecution, {}, {}, {});
  empty.validate();
  check_batch(empty, "one empty segment");
}

TEST(LearnerSweepTest, BatchesLargerThanTheCachesGiveTheSameBits) {
  // Over a million tokens: thousands of lane refills, prefetches running ahead of every array.
  testing::RandomBatchShape shape;
  shape.rollouts = 1000;
  shape.max_segment_tokens = 900;
  const Batch b = testing::random_batch(6000, shape);
  ASSERT_GT(b.num_tokens(), int64_t{1} << 20);
  const std::vector<Variant> all = variants();
  ASSERT_EQ(std::string(all[3].name), "stitched target, gamma 0.97");
  check_batch(b, "large", {all[0], all[3]});  // paper defaults; the stitched target (lanes carry corr too)
}

TEST(LearnerSweepTest, LearnerStepEqualsTheThreeCalls) {
  const Batch b = testing::random_batch(7000);
  LearnerOptions o;
  o.kl_coef = 0.1;
  const Learner learner(o);
  Advantages adv;
  Gradients grads;
  const LossResult got = learner.step(b, adv, &grads);
  const Advantages want_adv = learner.advantages(b);
  Gradients want_grads;
  const LossResult want = learner.losses(b, want_adv, &want_grads);
  expect_same(got, want, "Learner::step");
  EXPECT_TRUE(same_bits(adv.advantages, want_adv.advantages));
  EXPECT_TRUE(same_bits(adv.returns, want_adv.returns));
  EXPECT_TRUE(same_bits(grads.logprobs, want_grads.logprobs));
  EXPECT_TRUE(same_bits(grads.values, want_grads.values));
  EXPECT_EQ(adv.n_sampled, want_adv.n_sampled);
  // Buffers are reused: a second step over a smaller batch resizes them.
  const Batch small = testing::random_batch(7001);
  learner.step(small, adv, &grads);
  EXPECT_EQ(static_cast<int64_t>(adv.advantages.size()), small.num_tokens());
  EXPECT_EQ(static_cast<int64_t>(grads.logprobs.size()), small.num_tokens());
}

}  // namespace
}  // namespace crl::learners
