// The neural policy's clipped PPO update (issue 15 item 2): several epochs of shuffled minibatches per batch
// make the ratio move and the clip bind (measured in TrainStep::stats), every minibatch is weighted by the
// batch's one global token denominator (so minibatch gradients add up to the batch's), and the update is a
// deterministic function of the seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "engine/runner.h"
#include "envs/registry.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "policies/neural/neural_policy.h"
#include "policies/rollout.h"
#include "tests/policies/neural_training_fixture.h"

namespace crl::neural {
namespace {

using testing::Fixture;
using testing::ppo;
using testing::rewarded;

struct Update {
  learners::UpdateStats stats;
  std::vector<float> parameters;
};

Update actor_update(const Fixture& f, const learners::LearnerOptions& o, uint64_t seed, double lr) {
  NeuralPolicy policy(f.target, {});
  policy.initialize(seed);
  const std::vector<Trajectory> ts = rewarded(f, policy, 24, seed);
  const learners::Learner learner(o);
  const learners::Batch batch = learners::make_batch(ts);
  const learners::Advantages targets = learner.advantages(batch);
  Update out;
  policy.train(TrainStep{&ts, &batch, &targets, &learner, learners::UpdateKind::kActor, lr, lr, &out.stats});
  out.parameters = policy.network().parameters();
  return out;
}

// Item (b): one epoch over one minibatch evaluates the policy it sampled with: ratio exactly 1, nothing
// clipped, KL 0. Four epochs of four minibatches: the later minibatches see the policy the earlier steps
// moved, so the ratio leaves 1 and the clip binds on some tokens. The old trainer made one pass (ratio 1).
TEST(NeuralPpo, EpochsAndMinibatchesMoveTheRatioAndTheClipBinds) {
  Fixture f;
  const Update one = actor_update(f, ppo(1, 1), 3, 0.05);
  EXPECT_EQ(one.stats.steps, 1);
  EXPECT_GT(one.stats.token_evals, 0);
  // (Up to float rounding: sampling scores one decision at a time, training in one batched forward.)
  EXPECT_NEAR(one.stats.mean_abs_ratio, 0.0, 1e-5);
  EXPECT_NEAR(one.stats.max_ratio, 1.0, 1e-5);
  EXPECT_EQ(one.stats.clip_fraction, 0.0);
  EXPECT_NEAR(one.stats.approx_kl, 0.0, 1e-9);
  EXPECT_GT(one.stats.entropy, 0.1);  // an untrained pointer is close to uniform
  const Update many = actor_update(f, ppo(4, 4), 3, 0.05);
  EXPECT_EQ(many.stats.steps, 16);
  EXPECT_EQ(many.stats.token_evals, 4 * one.stats.token_evals);  // every token once per epoch
  EXPECT_GT(many.stats.mean_abs_ratio, 0.05);
  EXPECT_GT(many.stats.max_ratio, 1.2);
  EXPECT_GT(many.stats.clip_fraction, 0.0);
  EXPECT_GT(many.stats.approx_kl, 0.0);
  std::printf(
      "one pass: |rho-1| %.4f, max %.4f, clip %.4f, kl %.5f, entropy %.4f\n4x4: |rho-1| %.4f, max %.4f, "
      "clip %.4f, kl %.5f, entropy %.4f\n",
      one.stats.mean_abs_ratio, one.stats.max_ratio, one.stats.clip_fraction, one.stats.approx_kl,
      one.stats.entropy, many.stats.mean_abs_ratio, many.stats.max_ratio, many.stats.clip_fraction,
      many.stats.approx_kl, many.stats.entropy);
  // Deterministic: the shuffle's stream is keyed by the seed and the optimizer's position.
  const Update again = actor_update(f, ppo(4, 4), 3, 0.05);
  EXPECT_EQ(again.parameters, many.parameters);
  EXPECT_EQ(again.stats.clip_fraction, many.stats.clip_fraction);
}

// Item (c): the ONE global denominator (spec 1.5). At fixed parameters, the gradients of two minibatches
// (halves of the rollouts) sum to the whole batch's gradient, because each token is divided by the count of
// enabled actor tokens of the whole batch, not of its minibatch. With the summary loss masked the count
// changes (summary tokens leave it) and the property still holds.
TEST(NeuralPpo, MinibatchGradientsSumToTheBatchGradient) {
  Fixture f;
  NeuralPolicy policy(f.target, {});
  policy.initialize(8);
  // Non-zero heads and value head, so that every part of the gradient is non-trivial.
  Rng rng(StreamKey{2, 0, 0, StreamRole::kLearner, 5});
  Network& net = policy.network();
  for (int64_t i = net.shape().w(0); i < net.shape().size(); ++i)
    net.parameters()[i] = 0.3f * (rng.uniform_float() - 0.5f);
  const std::vector<Trajectory> ts = rewarded(f, policy, 10, 8);
  for (const bool masked : {false, true}) {
    learners::LearnerOptions o = ppo(1, 2);
    o.summary_loss_masked = masked;
    const learners::Learner learner(o);
    const learners::Batch batch = learners::make_batch(ts);
    const learners::Advantages targets = learner.advantages(batch);
    for (const auto kind : {learners::UpdateKind::kActor, learners::UpdateKind::kCritic}) {
      const TrainStep step{&ts, &batch, &targets, &learner, kind, 0.0, 0.0};
      const std::vector<float> full = policy.gradient(step, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
      const std::vector<float> a = policy.gradient(step, {0, 3, 4, 8, 9});
      const std::vector<float> b = policy.gradient(step, {1, 2, 5, 6, 7});
      ASSERT_EQ(a.size(), full.size());
      double scale = 0.0, error = 0.0, part = 0.0;
      for (size_t i = 0; i < full.size(); ++i) {
        scale = std::max(scale, double(std::fabs(full[i])));
        part = std::max(part, double(std::fabs(a[i])));
        error = std::max(error, double(std::fabs(a[i] + b[i] - full[i])));
      }
      EXPECT_GT(scale, 1e-4) << "masked " << masked;
      EXPECT_GT(part, 1e-5) << "masked " << masked;
      EXPECT_LT(error, 1e-5 * scale + 1e-7) << "masked " << masked;
    }
  }
}

}  // namespace
}  // namespace crl::neural
