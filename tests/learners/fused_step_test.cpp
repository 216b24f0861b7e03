// The fused CPU step (advantages + normalizer + losses in one sweep) against the separate passes, and every
// instruction-set copy of the kernels against the generic one: the same bits, for every switch of the
// learner, for segments shorter and longer than a kernel block, and on the streaming-store path.
#include <gtest/gtest.h>

#include <cstring>

#include "learners/cpu/cpu_learner.h"
#include "tests/learners/random_batch.h"

namespace crl::learners {
namespace {

struct Variant {
  const char* name;
  LearnerOptions options;
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  out.push_back({"paper defaults", {}});
  LearnerOptions o;
  o.lambda_mode = LambdaMode::kFixed;
  o.lambda = 0.9;
  o.gamma = 0.99;
  out.push_back({"fixed lambda, gamma 0.99", o});
  o = {};
  o.lambda_mode = LambdaMode::kTokenwise;
  o.critic_target = CriticTarget::kCorrected;
  out.push_back({"tokenwise lambda, corrected target", o});
  o = {};
  o.critic_target = CriticTarget::kStitched;
  o.correction = false;
  out.push_back({"stitched target, no correction", o});
  o = {};
  o.summary_loss_masked = true;
  o.token_level_normalization = false;
  out.push_back({"summary loss masked, per-segment means", o});
  o = {};
  o.positive_only = true;
  o.kl_coef = 0.05;
  o.value_clip = 0.2;
  out.push_back({"positive only, k3 KL, value clip", o});
  o = {};
  o.whiten_advantages = true;
  out.push_back({"whitening (separate passes)", o});
  return out;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}
bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof(double)) == 0;
}

void expect_same(const LossResult& a, const LossResult& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.policy_loss, b.policy_loss))
      << what << ": " << a.policy_loss << " vs " << b.policy_loss;
  EXPECT_TRUE(same_bits(a.kl, b.kl)) << what;
  EXPECT_TRUE(same_bits(a.actor_loss, b.actor_loss)) << what;
  EXPECT_TRUE(same_bits(a.value_loss, b.value_loss))
      << what << ": " << a.value_loss << " vs " << b.value_loss;
  EXPECT_TRUE(same_bits(a.clip_fraction, b.clip_fraction)) << what;
  EXPECT_TRUE(same_bits(a.value_clip_fraction, b.value_clip_fraction)) << what;
}

// The separate passes on the generic kernel: the reference every fused / vectorized copy must equal.
struct Separate {
  Advantages adv;
  LossNormalizer norm;
  Gradients grads;
  LossResult loss;
};
Separate separate(const Batch& b, const LearnerOptions& o) {
  Separate r;
  cpu::compute_advantages(b, o, r.adv);
  r.norm = cpu::make_normalizer(b, o);
  r.grads.resize(b.num_tokens());
  r.loss =
      cpu::compute_losses(b, r.adv, r.norm, o, TokenRange{0, b.num_tokens()}, &r.grads, cpu::Isa::kGeneric);
  return r;
}

void check_batch(const Batch& b, const std::string& label) {
  for (const Variant& v : variants()) {
    const Separate want = separate(b, v.options);
    for (const cpu::Isa isa : cpu::supported_isas()) {
      const std::string what = label + ", " + v.name + ", " + std::string(cpu::isa_name(isa));
      // Separate losses on this instruction set.
      Gradients grads;
      grads.resize(b.num_tokens());
      expect_same(
          cpu::compute_losses(b, want.adv, want.norm, v.options, TokenRange{0, b.num_tokens()}, &grads, isa),
          want.loss, what + " (losses)");
      EXPECT_TRUE(same_bits(grads.logprobs, want.grads.logprobs)) << what;
      EXPECT_TRUE(same_bits(grads.values, want.grads.values)) << what;
      // The fused step on this instruction set, into buffers holding garbage from an earlier call.
      Advantages adv;
      adv.advantages.assign(b.num_tokens() + 3, 7.0);
      LossNormalizer norm;
      Gradients fused_grads;
      fused_grads.logprobs.assign(b.num_tokens(), 9.0);
      fused_grads.values.assign(b.num_tokens(), 9.0);
      expect_same(cpu::compute_step(b, v.options, adv, norm, &fused_grads, isa), want.loss,
                  what + " (fused)");
      EXPECT_TRUE(same_bits(adv.advantages, want.adv.advantages)) << what;
      EXPECT_TRUE(same_bits(adv.returns, want.adv.returns)) << what;
      EXPECT_EQ(adv.n_sampled, want.adv.n_sampled) << what;
      EXPECT_EQ(adv.n_after, want.adv.n_after) << what;
      EXPECT_TRUE(same_bits(adv.lambda, want.adv.lambda)) << what;
      EXPECT_TRUE(same_bits(adv.factor, want.adv.factor)) << what;
      EXPECT_TRUE(same_bits(norm.actor_scale, want.norm.actor_scale)) << what;
      EXPECT_TRUE(same_bits(norm.critic_scale, want.norm.critic_scale)) << what;
      EXPECT_TRUE(same_bits(fused_grads.logprobs, want.grads.logprobs)) << what;
      EXPECT_TRUE(same_bits(fused_grads.values, want.grads.values)) << what;
      // Without gradients the losses are the same.
      expect_same(cpu::compute_step(b, v.options, adv, norm, nullptr, isa), want.loss,
                  what + " (no gradients)");
    }
  }
}

TEST(FusedStepTest, EqualsSeparatePassesOnShortSegments) {
  for (uint64_t seed = 0; seed < 20; ++seed)
    check_batch(testing::random_batch(500 + seed), "seed " + std::to_string(seed));
}

TEST(FusedStepTest, EqualsSeparatePassesOnSegmentsLongerThanABlock) {
  testing::RandomBatchShape shape;
  shape.max_segment_tokens = 1500;  // several 256-token kernel blocks per segment, and partial last blocks
  shape.rollouts = 6;
  for (uint64_t seed = 0; seed < 4; ++seed)
    check_batch(testing::random_batch(900 + seed, shape), "long " + std::to_string(seed));
}

TEST(FusedStepTest, EqualsSeparatePassesWithoutLogprobs) {
  testing::RandomBatchShape shape;
  shape.with_logprobs = false;
  check_batch(testing::random_batch(41, shape), "no log-probs");
}

TEST(FusedStepTest, StreamingStoresOnALargeBatchGiveTheSameBits) {
  // Over 2^20 tokens the fused step writes around the caches (non-temporal stores).
  testing::RandomBatchShape shape;
  shape.rollouts = 1400;
  shape.max_segment_tokens = 600;
  const Batch b = testing::random_batch(4242, shape);
  ASSERT_GE(b.num_tokens(), int64_t{1} << 20);
  const LearnerOptions o;
  const Separate want = separate(b, o);
  for (const cpu::Isa isa : cpu::supported_isas()) {
    Advantages adv;
    LossNormalizer norm;
    Gradients grads;
    grads.resize(b.num_tokens());
    expect_same(cpu::compute_step(b, o, adv, norm, &grads, isa), want.loss, std::string(cpu::isa_name(isa)));
    EXPECT_TRUE(same_bits(adv.advantages, want.adv.advantages));
    EXPECT_TRUE(same_bits(adv.returns, want.adv.returns));
    EXPECT_TRUE(same_bits(grads.logprobs, want.grads.logprobs));
    EXPECT_TRUE(same_bits(grads.values, want.grads.values));
  }
}

TEST(FusedStepTest, FacadeStepEqualsItsThreeCalls) {
  const Batch b = testing::random_batch(77);
  const Learner learner(LearnerOptions{});
  Advantages adv;
  LossNormalizer norm;
  Gradients grads;
  const LossResult fused = learner.step(b, adv, norm, &grads);
  const Advantages want_adv = learner.advantages(b);
  Gradients want_grads;
  const LossResult want = learner.losses(b, want_adv, &want_grads);
  expect_same(fused, want, "facade");
  EXPECT_TRUE(same_bits(adv.advantages, want_adv.advantages));
  EXPECT_TRUE(same_bits(grads.logprobs, want_grads.logprobs));
}

}  // namespace
}  // namespace crl::learners
