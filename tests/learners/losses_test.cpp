// Token-normalized clipped PPO and value losses (spec 1.5): a hand-computed case, gradients against finite
// differences, micro-batch invariance (one global denominator), and the no-token-level-loss ablation.
#include <gtest/gtest.h>

#include <cmath>

#include "learners/learner.h"
#include "tests/learners/random_batch.h"

namespace crl::learners {
namespace {

// Three actor tokens in one segment, eps = 0.2:
//   A = 2,  rho = 1.5: clipped (1.2 * 2 = 2.4 < 3), l = -2.4, dl/dlogp = 0
//   A = -1, rho = 0.5: clipped (0.8 * -1 = -0.8 < -0.5), l = 0.8, dl/dlogp = 0
//   A = 1,  rho = 1.1: unclipped, l = -1.1, dl/dlogp = -1.1
// L = (-2.4 + 0.8 - 1.1) / 3; clip fraction 2/3.
TEST(LearnerLossesTest, ClippedSurrogateByHand) {
  Batch b;
  b.begin_rollout(0.0);
  b.add_segment(SegmentKind::kExecution, {0.0, 0.0, 0.0}, {1, 1, 1}, {1, 1, 1});
  b.old_logprobs = {0.0, 0.0, 0.0};
  b.new_logprobs = {std::log(1.5), std::log(0.5), std::log(1.1)};
  Advantages a;
  a.advantages = {2.0, -1.0, 1.0};
  a.returns = {1.0, 0.0, -1.0};
  b.new_values = {0.5, 0.0, 0.0};
  Gradients g;
  const LossResult loss = Learner(LearnerOptions{}).losses(b, a, &g);
  EXPECT_NEAR(loss.policy_loss, (-2.4 + 0.8 - 1.1) / 3.0, 1e-14);
  EXPECT_NEAR(loss.clip_fraction, 2.0 / 3.0, 1e-15);
  EXPECT_EQ(g.logprobs[0], 0.0);
  EXPECT_EQ(g.logprobs[1], 0.0);
  EXPECT_NEAR(g.logprobs[2], -1.1 / 3.0, 1e-14);
  // Value loss: ((0.5 - 1)^2 + 0 + (0 + 1)^2) / 3, gradient 2 (V - G) / 3.
  EXPECT_NEAR(loss.value_loss, (0.25 + 1.0) / 3.0, 1e-15);
  EXPECT_NEAR(g.values[0], 2.0 * -0.5 / 3.0, 1e-15);
  EXPECT_NEAR(g.values[2], 2.0 * 1.0 / 3.0, 1e-15);
}

double total_loss(const Learner& learner, const Batch& b, const Advantages& a) {
  const LossResult r = learner.losses(b, a, nullptr);
  return r.actor_loss + r.value_loss;
}

// Gradients agree with central differences of the loss (tokens near a clip boundary are skipped: the loss
// has a kink there).
TEST(LearnerLossesTest, GradientsMatchFiniteDifferences) {
  for (int variant = 0; variant < 3; ++variant) {
    Batch b = testing::random_batch(31 + variant);
    LearnerOptions o;
    o.kl_coef = variant == 1 ? 0.05 : 0.0;
    o.value_clip = variant == 2 ? 0.1 : 0.0;
    o.token_level_normalization = variant != 2;
    const Learner learner(o);
    const Advantages a = learner.advantages(b);
    Gradients g;
    learner.losses(b, a, &g);
    const double h = 1e-6;
    for (int64_t t = 0; t < b.num_tokens(); t += 3) {
      const double rho = std::exp(b.new_logprobs[t] - b.old_logprobs[t]);
      const double delta_v = b.new_values[t] - b.values[t];
      if (std::abs(rho - 0.8) < 1e-4 || std::abs(rho - 1.2) < 1e-4) continue;
      if (std::abs(std::abs(delta_v) - o.value_clip) < 1e-4) continue;
      Batch plus = b, minus = b;
      plus.new_logprobs[t] += h;
      minus.new_logprobs[t] -= h;
      const double numeric_lp = (total_loss(learner, plus, a) - total_loss(learner, minus, a)) / (2 * h);
      EXPECT_NEAR(g.logprobs[t], numeric_lp, 1e-7) << "variant " << variant << " token " << t;
      plus = b;
      minus = b;
      plus.new_values[t] += h;
      minus.new_values[t] -= h;
      const double numeric_v = (total_loss(learner, plus, a) - total_loss(learner, minus, a)) / (2 * h);
      EXPECT_NEAR(g.values[t], numeric_v, 1e-7) << "variant " << variant << " token " << t;
    }
  }
}

// Splitting the batch into micro-batches at arbitrary token positions (even inside segments) and adding
// their raw sums in any order gives the loss of the whole batch and the same gradients.
TEST(LearnerLossesTest, MicroBatchSplitsGiveTheSameLossAndGradient) {
  for (bool token_level : {true, false}) {
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      const Batch b = testing::random_batch(100 + seed);
      LearnerOptions o;
      o.token_level_normalization = token_level;
      o.kl_coef = 0.01;
      o.value_clip = 0.2;
      const Learner learner(o);
      const Advantages a = learner.advantages(b);
      Gradients whole_g;
      const LossResult whole = learner.losses(b, a, &whole_g);
      const LossNormalizer norm = learner.normalizer(b);
      Rng rng(StreamKey{seed, 1, 0, StreamRole::kLearner, 0});
      std::vector<int64_t> cuts{0, b.num_tokens()};
      const int pieces = 1 + static_cast<int>(rng.uniform_int(8));
      for (int i = 0; i < pieces; ++i)
        cuts.push_back(rng.uniform_int(static_cast<uint32_t>(b.num_tokens() + 1)));
      std::sort(cuts.begin(), cuts.end());
      // Visit the micro-batches in reverse order to make the point that order does not matter.
      LossResult sum;
      Gradients split_g;
      split_g.resize(b.num_tokens());
      for (size_t i = cuts.size() - 1; i-- > 0;)
        sum += learner.losses(b, a, norm, TokenRange{cuts[i], cuts[i + 1]}, &split_g);
      EXPECT_NEAR(sum.actor_loss, whole.actor_loss, 1e-12 * std::max(1.0, std::abs(whole.actor_loss)));
      EXPECT_NEAR(sum.value_loss, whole.value_loss, 1e-12 * std::max(1.0, std::abs(whole.value_loss)));
      EXPECT_NEAR(sum.kl, whole.kl, 1e-12);
      EXPECT_EQ(split_g.logprobs, whole_g.logprobs);
      EXPECT_EQ(split_g.values, whole_g.values);
    }
  }
}

// A per-micro-batch mean (the bug the global denominator prevents) does not give the batch loss.
TEST(LearnerLossesTest, PerMicroBatchMeansWouldDiffer) {
  const Batch b = testing::random_batch(77);
  const Learner learner{LearnerOptions{}};
  const Advantages a = learner.advantages(b);
  const double whole = learner.losses(b, a, nullptr).policy_loss;
  const int64_t mid = b.segment_offsets[b.num_segments() / 2];
  double biased = 0.0;
  for (TokenRange r : {TokenRange{0, mid}, TokenRange{mid, b.num_tokens()}}) {
    int64_t n = 0, total = 0;
    for (int64_t t = r.begin; t < r.end; ++t) n += b.actor_mask[t];
    for (int64_t t = 0; t < b.num_tokens(); ++t) total += b.actor_mask[t];
    biased += learner.losses(b, a, learner.normalizer(b), r, nullptr).policy_loss * total / n / 2.0;
  }
  EXPECT_GT(std::abs(biased - whole), 1e-6);
}

// Without token-level normalization: mean over each segment's tokens, then over segments.
TEST(LearnerLossesTest, NoTokenLevelNormalizationAveragesSegmentsEqually) {
  Batch b;
  b.begin_rollout(1.0);
  b.add_segment(SegmentKind::kExecution, {0.0, 0.0, 0.0}, {1, 1, 1}, {1, 1, 1});
  b.add_segment(SegmentKind::kSummary, {0.0}, {1}, {1});
  Advantages a;
  a.advantages = {1.0, 1.0, 1.0, 4.0};
  a.returns = {0.0, 0.0, 0.0, 0.0};
  LearnerOptions o;
  EXPECT_NEAR(Learner(o).losses(b, a, nullptr).policy_loss, -(1.0 + 1.0 + 1.0 + 4.0) / 4.0, 1e-15);
  o.token_level_normalization = false;
  EXPECT_NEAR(Learner(o).losses(b, a, nullptr).policy_loss, -(1.0 + 4.0) / 2.0, 1e-15);
}

TEST(LearnerLossesTest, ValueClippingTakesThePessimisticBranch) {
  Batch b;
  b.begin_rollout(0.0);
  b.add_segment(SegmentKind::kExecution, {0.0, 0.0}, {1, 1}, {1, 1});
  b.new_values = {0.5, -0.5};
  Advantages a;
  a.advantages = {0.0, 0.0};
  a.returns = {1.0, 1.0};
  LearnerOptions o;
  o.value_clip = 0.2;
  Gradients g;
  const LossResult r = Learner(o).losses(b, a, &g);
  // Token 0: unclipped (0.5 - 1)^2 = 0.25 < clipped (0.2 - 1)^2 = 0.64 -> 0.64, gradient 0 (outside the
  // clip). Token 1: unclipped (-0.5 - 1)^2 = 2.25 > clipped (-0.2 - 1)^2 = 1.44 -> 2.25, gradient 2 * -1.5.
  EXPECT_NEAR(r.value_loss, (0.64 + 2.25) / 2.0, 1e-15);
  EXPECT_EQ(g.values[0], 0.0);
  EXPECT_NEAR(g.values[1], -3.0 / 2.0, 1e-15);
  EXPECT_NEAR(r.value_clip_fraction, 0.5, 1e-15);
}

}  // namespace
}  // namespace crl::learners
