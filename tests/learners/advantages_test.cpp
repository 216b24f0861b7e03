// The advantage estimator (spec 1.4, 1.6): hand-computed cases, the zero-critic full-trajectory reference,
// every ablation switch, and the zero-reward audit.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/error.h"
#include "learners/cpu/cpu_learner.h"
#include "learners/learner.h"
#include "learners/reference.h"
#include "tests/learners/random_batch.h"

namespace crl::learners {
namespace {

// One rollout, R = 1, gamma = 1: an execution segment with values [0.5, (9.0 unsampled), 0.25] and a summary
// segment with value [0.8]. By hand:
//   n = (2, 1), lambda = (1 - 1/3, 1 - 1/1.5) = (2/3, 1/3), N_after = (1, 0).
//   summary:   A = 1 - 0.8 = 0.2, factor 1, G_local = 1.0.
//   execution: A(t2) = 1 - 0.25 = 0.75; A(t0) = (0.25 - 0.5) + 2/3 * 0.75 = 0.25 (t1 is skipped);
//              factor = (2/3)^1; A_hat = (1/6, 0, 0.5); G_local = (0.75, 9.0, 1.0);
//              G_corrected = (1/6 + 0.5, 9.0, 0.5 + 0.25);
//              stitched: last token bootstraps from V = 0.8 with r = 0: A'(t2) = 0.8 - 0.25 = 0.55,
//              A'(t0) = -0.25 + 2/3 * 0.55; G = A' + V.
Batch two_segment_batch() {
  Batch b;
  b.begin_rollout(1.0, "hand");
  b.add_segment(SegmentKind::kExecution, {0.5, 9.0, 0.25}, {1, 0, 1}, {1, 0, 1});
  b.add_segment(SegmentKind::kSummary, {0.8}, {1}, {1});
  b.validate();
  return b;
}

TEST(LearnerAdvantagesTest, TwoSegmentRolloutByHand) {
  const Batch b = two_segment_batch();
  const Advantages a = Learner(LearnerOptions{}).advantages(b);
  EXPECT_EQ(a.n_sampled, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(a.n_after, (std::vector<int64_t>{1, 0}));
  EXPECT_NEAR(a.lambda[0], 2.0 / 3.0, 1e-15);
  EXPECT_NEAR(a.lambda[1], 1.0 / 3.0, 1e-15);
  EXPECT_NEAR(a.factor[0], 2.0 / 3.0, 1e-15);
  EXPECT_EQ(a.factor[1], 1.0);
  EXPECT_NEAR(a.advantages[0], 1.0 / 6.0, 1e-15);
  EXPECT_EQ(a.advantages[1], 0.0);  // unsampled: advantage 0, return V
  EXPECT_NEAR(a.advantages[2], 0.5, 1e-15);
  EXPECT_NEAR(a.advantages[3], 0.2, 1e-15);
  EXPECT_NEAR(a.returns[0], 0.75, 1e-15);
  EXPECT_EQ(a.returns[1], 9.0);
  EXPECT_NEAR(a.returns[2], 1.0, 1e-15);
  EXPECT_NEAR(a.returns[3], 1.0, 1e-15);

  LearnerOptions corrected;
  corrected.critic_target = CriticTarget::kCorrected;
  const Advantages c = Learner(corrected).advantages(b);
  EXPECT_NEAR(c.returns[0], 1.0 / 6.0 + 0.5, 1e-15);
  EXPECT_NEAR(c.returns[2], 0.75, 1e-15);
  EXPECT_NEAR(c.advantages[0], 1.0 / 6.0, 1e-15);  // actor advantages do not depend on the critic target

  LearnerOptions stitched;
  stitched.critic_target = CriticTarget::kStitched;
  const Advantages st = Learner(stitched).advantages(b);
  EXPECT_NEAR(st.returns[2], 0.55 + 0.25, 1e-15);
  EXPECT_NEAR(st.returns[0], -0.25 + 2.0 / 3.0 * 0.55 + 0.5, 1e-15);
  EXPECT_NEAR(st.returns[3], 1.0, 1e-15);  // the final segment keeps R
  EXPECT_EQ(st.advantages, a.advantages);

  LearnerOptions uncorrected;
  uncorrected.correction = false;
  const Advantages u = Learner(uncorrected).advantages(b);
  EXPECT_NEAR(u.advantages[0], 0.25, 1e-15);
  EXPECT_NEAR(u.advantages[2], 0.75, 1e-15);
  EXPECT_EQ(u.factor[0], 1.0);

  LearnerOptions fixed;
  fixed.lambda_mode = LambdaMode::kFixed;
  fixed.lambda = 0.5;
  const Advantages f = Learner(fixed).advantages(b);
  EXPECT_NEAR(f.advantages[0], 0.5 * (-0.25 + 0.5 * 0.75), 1e-15);
  EXPECT_NEAR(f.advantages[3], 0.2, 1e-15);
}

// Skipped positions do not break the recurrence: inserting unsampled tokens anywhere leaves the advantages
// of the sampled tokens unchanged (they would change if masked positions were zero-filled into GAE).
TEST(LearnerAdvantagesTest, UnsampledPositionsAreSkippedNotZeroFilled) {
  Batch compact;
  compact.begin_rollout(1.0);
  compact.add_segment(SegmentKind::kExecution, {0.5, 0.25}, {1, 1}, {1, 1});
  compact.add_segment(SegmentKind::kSummary, {0.8}, {1}, {1});
  const Advantages a = Learner(LearnerOptions{}).advantages(compact);
  const Advantages b = Learner(LearnerOptions{}).advantages(two_segment_batch());
  EXPECT_EQ(a.advantages[0], b.advantages[0]);
  EXPECT_EQ(a.advantages[1], b.advantages[2]);
  EXPECT_EQ(a.advantages[2], b.advantages[3]);
}

// The corrected advantages equal the zero-critic full-trajectory reference for every segment.
TEST(LearnerAdvantagesTest, CorrectionEqualsZeroCriticFullTrajectoryReference) {
  for (LambdaMode mode : {LambdaMode::kAdaptive, LambdaMode::kFixed, LambdaMode::kTokenwise}) {
    for (double gamma : {1.0, 0.999, 0.9}) {
      for (uint64_t seed = 1; seed <= 20; ++seed) {
        testing::RandomBatchShape shape;
        shape.max_segment_tokens = 60;
        Batch b = testing::random_batch(seed, shape);
        std::fill(b.values.begin(), b.values.end(), 0.0);  // V = 0
        LearnerOptions o;
        o.gamma = gamma;
        o.lambda_mode = mode;
        o.lambda = 0.97;
        const Advantages a = Learner(o).advantages(b);
        const std::vector<double> ref = zero_critic_reference(b, o);
        for (int64_t t = 0; t < b.num_tokens(); ++t) {
          ASSERT_NEAR(a.advantages[t], ref[t], 1e-12 * std::max(1.0, std::abs(ref[t])))
              << "mode " << lambda_mode_name(mode) << " gamma " << gamma << " seed " << seed << " token "
              << t;
        }
      }
    }
  }
}

// Without the correction, the reference is not matched (so the test above can fail).
TEST(LearnerAdvantagesTest, UncorrectedDiffersFromReference) {
  Batch b = testing::random_batch(7);
  std::fill(b.values.begin(), b.values.end(), 0.0);
  LearnerOptions o;
  o.correction = false;
  const Advantages a = Learner(o).advantages(b);
  const std::vector<double> ref = zero_critic_reference(b, o);
  double max_diff = 0.0;
  for (int64_t t = 0; t < b.num_tokens(); ++t)
    max_diff = std::max(max_diff, std::abs(a.advantages[t] - ref[t]));
  EXPECT_GT(max_diff, 1e-3);
}

// N_after counts the critic-mask (sampled) tokens of later segments of the same rollout only.
TEST(LearnerAdvantagesTest, NAfterCountsLaterSampledTokensOfTheSameRollout) {
  const Batch b = testing::random_batch(3);
  const Advantages a = Learner(LearnerOptions{}).advantages(b);
  for (int64_t r = 0; r < b.num_rollouts(); ++r) {
    for (int64_t s = b.rollout_offsets[r]; s < b.rollout_offsets[r + 1]; ++s) {
      int64_t expected = 0;
      for (int64_t j = s + 1; j < b.rollout_offsets[r + 1]; ++j) {
        for (int64_t t = b.segment_offsets[j]; t < b.segment_offsets[j + 1]; ++t)
          expected += b.critic_mask[t];
      }
      EXPECT_EQ(a.n_after[s], expected) << "segment " << s;
    }
  }
}

// The factor is computed in log space: a tiny but nonzero factor (about e^-10) survives.
TEST(LearnerAdvantagesTest, FactorInLogSpaceForLongTails) {
  Batch b;
  b.begin_rollout(1.0);
  b.add_segment(SegmentKind::kExecution, std::vector<double>(2000, 0.0), std::vector<uint8_t>(2000, 1),
                std::vector<uint8_t>(2000, 1));
  b.add_segment(SegmentKind::kSummary, std::vector<double>(30000, 0.0), std::vector<uint8_t>(30000, 1),
                std::vector<uint8_t>(30000, 1));
  const Advantages a = Learner(LearnerOptions{}).advantages(b);
  const double expected = std::exp(30000.0 * std::log1p(-1.0 / 3000.0));
  EXPECT_NEAR(a.factor[0], expected, 1e-15);
  EXPECT_NEAR(std::log(a.factor[0]), -10.0, 0.01);
}

// correction_segments: the factor multiplies only the chosen kind's segments; the others keep their local
// advantage (factor 1), N_after and lambda are unchanged, and "all" is the default. On random batches every
// segment's advantages equal the corrected run's (its kind chosen) or the uncorrected run's (the other kind).
TEST(LearnerAdvantagesTest, CorrectionSegmentsChoosesWhichKindIsCorrected) {
  // Three segments, so that an execution segment has a later summary and a summary a later execution.
  Batch b;
  b.begin_rollout(1.0);
  b.add_segment(SegmentKind::kExecution, {0.5, 0.25}, {1, 1}, {1, 1});
  b.add_segment(SegmentKind::kSummary, {0.8, 0.1, 0.3}, {1, 1, 1}, {1, 1, 1});
  b.add_segment(SegmentKind::kExecution, {0.6}, {1}, {1});
  b.validate();
  const Advantages all = Learner(LearnerOptions{}).advantages(b);
  EXPECT_NEAR(all.factor[0], std::pow(2.0 / 3.0, 4), 1e-15);  // lambda_0 = 1 - 1/3, N_after 4
  EXPECT_NEAR(all.factor[1], 7.0 / 9.0, 1e-15);               // lambda_1 = 1 - 1/4.5, N_after 1
  LearnerOptions none_options;
  none_options.correction = false;
  const Advantages none = Learner(none_options).advantages(b);

  LearnerOptions execution_options;
  execution_options.correction_segments = CorrectionSegments::kExecution;
  const Advantages execution = Learner(execution_options).advantages(b);
  EXPECT_EQ(execution.factor, (std::vector<double>{all.factor[0], 1.0, 1.0}));
  LearnerOptions summary_options;
  summary_options.correction_segments = CorrectionSegments::kSummary;
  const Advantages summary = Learner(summary_options).advantages(b);
  EXPECT_EQ(summary.factor, (std::vector<double>{1.0, all.factor[1], 1.0}));
  for (const Advantages* a : {&execution, &summary}) {
    EXPECT_EQ(a->n_after, all.n_after);
    EXPECT_EQ(a->lambda, all.lambda);
  }
  // With the correction off the switch changes nothing.
  none_options.correction_segments = CorrectionSegments::kSummary;
  EXPECT_EQ(Learner(none_options).advantages(b).advantages, none.advantages);

  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const Batch r = testing::random_batch(seed);
    for (CriticTarget target : {CriticTarget::kLocal, CriticTarget::kCorrected}) {
      LearnerOptions o;
      o.critic_target = target;
      const Advantages corrected = Learner(o).advantages(r);
      o.correction = false;
      const Advantages uncorrected = Learner(o).advantages(r);
      o.correction = true;
      for (CorrectionSegments kind : {CorrectionSegments::kExecution, CorrectionSegments::kSummary}) {
        o.correction_segments = kind;
        const Advantages a = Learner(o).advantages(r);
        for (int64_t s = 0; s < r.num_segments(); ++s) {
          const bool applies =
              (kind == CorrectionSegments::kSummary) == (r.segment_kind[s] == SegmentKind::kSummary);
          const Advantages& expected = applies ? corrected : uncorrected;
          for (int64_t t = r.segment_offsets[s]; t < r.segment_offsets[s + 1]; ++t) {
            ASSERT_EQ(a.advantages[t], expected.advantages[t]) << "seed " << seed << " segment " << s;
            ASSERT_EQ(a.returns[t], expected.returns[t]) << "seed " << seed << " segment " << s;
          }
        }
      }
    }
  }
}

// "w/o sum.": the summary keeps its critic mask and still counts in N_after; only the actor changes.
TEST(LearnerAdvantagesTest, SummaryLossMaskedKeepsCriticAndNAfter) {
  const Batch b = two_segment_batch();
  LearnerOptions o;
  o.summary_loss_masked = true;
  const Advantages masked = Learner(o).advantages(b);
  const Advantages full = Learner(LearnerOptions{}).advantages(b);
  EXPECT_EQ(masked.n_after, full.n_after);
  EXPECT_EQ(masked.advantages, full.advantages);
  EXPECT_EQ(masked.returns, full.returns);
  const LossNormalizer n = Learner(o).normalizer(b);
  EXPECT_EQ(n.actor_scale[1], 0.0);         // no actor loss on the summary
  EXPECT_EQ(n.actor_scale[0], 1.0 / 2.0);   // the global actor denominator excludes summary tokens
  EXPECT_EQ(n.critic_scale[1], 1.0 / 3.0);  // the critic still trains on it
}

TEST(LearnerAdvantagesTest, PositiveOnlyZeroesNonPositiveRollouts) {
  const Batch b = testing::random_batch(11);
  LearnerOptions o;
  o.positive_only = true;
  const Advantages p = Learner(o).advantages(b);
  const Advantages full = Learner(LearnerOptions{}).advantages(b);
  EXPECT_EQ(p.returns, full.returns);  // the critic is unchanged
  int positives = 0;
  for (int64_t r = 0; r < b.num_rollouts(); ++r) {
    positives += b.rewards[r] > 0.0;
    for (int64_t t = b.segment_offsets[b.rollout_offsets[r]]; t < b.segment_offsets[b.rollout_offsets[r + 1]];
         ++t) {
      EXPECT_EQ(p.advantages[t], b.rewards[r] > 0.0 ? full.advantages[t] : 0.0);
    }
  }
  EXPECT_GT(positives, 0);
  EXPECT_LT(positives, b.num_rollouts());
}

TEST(LearnerAdvantagesTest, WhiteningGivesZeroMeanUnitVarianceOverActorTokens) {
  const Batch b = testing::random_batch(5);
  LearnerOptions o;
  o.whiten_advantages = true;
  const Advantages w = Learner(o).advantages(b);
  double sum = 0.0, squares = 0.0;
  int64_t n = 0;
  for (int64_t t = 0; t < b.num_tokens(); ++t) {
    if (!b.actor_mask[t]) continue;
    sum += w.advantages[t];
    squares += w.advantages[t] * w.advantages[t];
    ++n;
  }
  EXPECT_NEAR(sum / n, 0.0, 1e-12);
  EXPECT_NEAR(squares / n, 1.0, 1e-6);
  EXPECT_EQ(w.returns, Learner(LearnerOptions{}).advantages(b).returns);
}

// Zero-initialised value head + all-zero rewards: exactly zero advantages, returns, losses and gradients,
// under every ablation (including whitening, whose epsilon keeps 0/0 away).
TEST(LearnerAdvantagesTest, ZeroRewardReplayWithZeroValueHeadIsExactlyZero) {
  testing::RandomBatchShape shape;
  shape.binary_rewards = true;
  Batch b = testing::random_batch(21, shape);
  std::fill(b.rewards.begin(), b.rewards.end(), 0.0);
  std::fill(b.values.begin(), b.values.end(), 0.0);
  b.new_values = b.values;
  b.new_logprobs = b.old_logprobs;  // a replay: the policy has not moved
  b.ref_logprobs = b.old_logprobs;
  for (int variant = 0; variant < 6; ++variant) {
    LearnerOptions o;
    o.whiten_advantages = variant == 1;
    o.critic_target = variant == 2   ? CriticTarget::kStitched
                      : variant == 3 ? CriticTarget::kCorrected
                                     : CriticTarget::kLocal;
    o.lambda_mode = variant == 4 ? LambdaMode::kTokenwise : LambdaMode::kAdaptive;
    o.token_level_normalization = variant != 5;
    o.value_clip = variant == 5 ? 0.2 : 0.0;
    o.kl_coef = variant == 5 ? 0.01 : 0.0;
    const Learner learner(o);
    const Advantages a = learner.advantages(b);
    Gradients g;
    const LossResult loss = learner.losses(b, a, &g);
    for (int64_t t = 0; t < b.num_tokens(); ++t) {
      ASSERT_EQ(a.advantages[t], 0.0) << "variant " << variant;
      ASSERT_EQ(a.returns[t], 0.0) << "variant " << variant;
      ASSERT_EQ(g.logprobs[t], 0.0) << "variant " << variant;
      ASSERT_EQ(g.values[t], 0.0) << "variant " << variant;
    }
    EXPECT_EQ(loss.actor_loss, 0.0);
    EXPECT_EQ(loss.value_loss, 0.0);
    EXPECT_EQ(loss.kl, 0.0);
  }
}

TEST(LearnerAdvantagesTest, OptionsOutOfRangeAreErrors) {
  LearnerOptions o;
  o.gamma = 1.5;
  EXPECT_THROW(Learner{o}, Error);
  o = LearnerOptions{};
  o.lambda_alpha = 0.5;
  EXPECT_THROW(Learner{o}, Error);
  o = LearnerOptions{};
  o.clip_epsilon = -0.1;
  EXPECT_THROW(Learner{o}, Error);
}

TEST(LearnerAdvantagesTest, CudaBackendWithoutDeviceIsAClearError) {
  std::string why;
  if (cuda_device_available(&why))
    GTEST_SKIP() << "a CUDA device is present; the no-device error is not reachable";
  try {
    Learner learner(LearnerOptions{}, Backend::kCuda);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace crl::learners
