// The CUDA back-end against the CPU reference. Two parts:
//  * the scan algebra (gae_scan.h) the kernels use, replayed on the CPU with random chunkings: runs
//    everywhere, so the GPU algorithm is checked even on machines without a GPU;
//  * CPU vs CUDA on random batches of up to 1M tokens under every switch, in double (relative 1e-6) and
//    float (relative 1e-4), where "relative" means |gpu - cpu| <= tol * max(1, |cpu|). Skipped with a
//    message when no device is present.
#include <gtest/gtest.h>

#include <cmath>

#include "learners/cpu/cpu_learner.h"
#include "learners/cuda/cuda_learner.h"
#include "learners/gae_scan.h"
#include "learners/learner.h"
#include "tests/learners/random_batch.h"

namespace crl::learners {
namespace {

// Replays the reduce-then-scan of the CUDA kernels on the CPU: split the tokens into random chunks, compose
// each chunk's maps, scan the chunk aggregates from the right, then sweep each chunk from its incoming state.
TEST(LearnerGaeScanTest, ChunkedScanEqualsSequentialEstimator) {
  for (CriticTarget target : {CriticTarget::kLocal, CriticTarget::kCorrected, CriticTarget::kStitched}) {
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      const Batch b = testing::random_batch(seed);
      LearnerOptions o;
      o.critic_target = target;
      o.gamma = seed % 2 ? 1.0 : 0.95;
      Advantages ref;
      cpu::compute_advantages(b, o, ref);
      // Per-segment inputs of the maps, as rollout_walk_kernel computes them.
      const int64_t S = b.num_segments();
      std::vector<double> gl(S), reward(S), c0(S, 0.0);
      std::vector<int64_t> last(S, -1), seg_of(b.num_tokens());
      for (int64_t r = 0; r < b.num_rollouts(); ++r) {
        bool has_next = false;
        double next_first = 0.0;
        for (int64_t s = b.rollout_offsets[r + 1] - 1; s >= b.rollout_offsets[r]; --s) {
          gl[s] = o.gamma * ref.lambda[s];
          reward[s] = b.rewards[r];
          if (target == CriticTarget::kStitched && has_next) c0[s] = o.gamma * next_first - b.rewards[r];
          int64_t first = -1;
          for (int64_t t = b.segment_offsets[s]; t < b.segment_offsets[s + 1]; ++t) {
            seg_of[t] = s;
            if (b.critic_mask[t]) {
              if (first < 0) first = t;
              last[s] = t;
            }
          }
          if (first >= 0) {
            has_next = true;
            next_first = b.values[first];
          }
        }
      }
      auto map_of = [&](int64_t t) {
        const int64_t s = seg_of[t];
        return gae_token_map<double>(b.critic_mask[t] != 0, last[s] == t, b.values[t], o.gamma, gl[s],
                                     reward[s], c0[s]);
      };
      Rng rng(StreamKey{seed, 2, 0, StreamRole::kLearner, 0});
      std::vector<int64_t> cuts{0, b.num_tokens()};
      for (int i = 0; i < 6; ++i) cuts.push_back(rng.uniform_int(static_cast<uint32_t>(b.num_tokens() + 1)));
      std::sort(cuts.begin(), cuts.end());
      const size_t chunks = cuts.size() - 1;
      std::vector<GaeMap<double>> agg(chunks, gae_identity<double>());
      for (size_t c = 0; c < chunks; ++c) {
        for (int64_t t = cuts[c + 1] - 1; t >= cuts[c]; --t) agg[c] = gae_compose(map_of(t), agg[c]);
      }
      GaeMap<double> suffix = gae_identity<double>();
      for (size_t c = chunks; c-- > 0;) {
        GaeState<double> state = gae_apply(suffix, GaeState<double>{0, 0, 0});
        for (int64_t t = cuts[c + 1] - 1; t >= cuts[c]; --t) {
          state = gae_apply(map_of(t), state);
          if (!b.critic_mask[t]) continue;
          const int64_t s = seg_of[t];
          const double scale = target == CriticTarget::kCorrected ? ref.factor[s] : 1.0;
          ASSERT_NEAR(ref.factor[s] * state.a, ref.advantages[t], 1e-12) << "seed " << seed << " token " << t;
          ASSERT_NEAR(scale * state.a + state.c + b.values[t], ref.returns[t], 1e-12)
              << "seed " << seed << " token " << t;
        }
        suffix = gae_compose(agg[c], suffix);
      }
    }
  }
}

bool skip_without_device() {
  std::string why;
  if (cuda_device_available(&why)) return false;
  std::cout << "[  SKIPPED ] CPU-vs-CUDA comparison: " << why << "\n";
  return true;
}

std::vector<LearnerOptions> all_switches() {
  std::vector<LearnerOptions> out(12);
  out[1].lambda_mode = LambdaMode::kTokenwise;
  out[2].lambda_mode = LambdaMode::kFixed;
  out[2].lambda = 0.95;
  out[2].gamma = 0.99;
  out[3].correction = false;
  out[3].critic_target = CriticTarget::kCorrected;
  out[4].critic_target = CriticTarget::kStitched;
  out[5].summary_loss_masked = true;
  out[6].token_level_normalization = false;
  out[7].whiten_advantages = true;
  out[7].positive_only = true;
  out[8].positive_only = true;
  out[9].value_clip = 0.2;
  out[9].kl_coef = 0.05;
  out[10].correction_segments = CorrectionSegments::kExecution;
  out[10].critic_target = CriticTarget::kCorrected;
  out[11].correction_segments = CorrectionSegments::kSummary;
  out[11].lambda_mode = LambdaMode::kTokenwise;
  return out;
}

template <typename T>
void compare_backends(double tol, int64_t max_tokens_hint) {
  const std::vector<LearnerOptions> variants = all_switches();
  for (int size_class = 0; size_class < 3; ++size_class) {
    testing::RandomBatchShape shape;
    shape.rollouts = size_class == 0 ? 5 : size_class == 1 ? 60 : 300;
    shape.max_segment_tokens = size_class == 0   ? 30
                               : size_class == 1 ? 600
                                                 : static_cast<int>(max_tokens_hint / 900);
    const Batch b = testing::random_batch(1000 + size_class, shape);
    cuda::DeviceLearner<T> device;
    device.upload(b);
    for (size_t v = 0; v < variants.size(); ++v) {
      const LearnerOptions& o = variants[v];
      Advantages cpu_adv;
      cpu::compute_advantages(b, o, cpu_adv);
      Gradients cpu_grad;
      cpu_grad.resize(b.num_tokens());
      const LossResult cpu_loss = cpu::compute_losses(b, cpu_adv, cpu::make_normalizer(b, o), o,
                                                      TokenRange{0, b.num_tokens()}, &cpu_grad);
      device.compute_advantages(o);
      device.compute_normalizer(o);
      const LossResult gpu_loss = device.compute_losses(o, TokenRange{0, b.num_tokens()});
      Advantages gpu_adv;
      Gradients gpu_grad;
      device.download(gpu_adv, &gpu_grad);
      auto close = [&](double gpu, double cpu_value) {
        return std::abs(gpu - cpu_value) <= tol * std::max(1.0, std::abs(cpu_value));
      };
      ASSERT_EQ(gpu_adv.n_after, cpu_adv.n_after) << "variant " << v;
      ASSERT_EQ(gpu_adv.n_sampled, cpu_adv.n_sampled) << "variant " << v;
      for (int64_t s = 0; s < b.num_segments(); ++s) {
        ASSERT_TRUE(close(gpu_adv.factor[s], cpu_adv.factor[s])) << "variant " << v << " segment " << s;
      }
      for (int64_t t = 0; t < b.num_tokens(); ++t) {
        ASSERT_TRUE(close(gpu_adv.advantages[t], cpu_adv.advantages[t]))
            << "variant " << v << " token " << t << ": " << gpu_adv.advantages[t] << " vs "
            << cpu_adv.advantages[t];
        ASSERT_TRUE(close(gpu_adv.returns[t], cpu_adv.returns[t]))
            << "variant " << v << " token " << t << ": " << gpu_adv.returns[t] << " vs "
            << cpu_adv.returns[t];
        ASSERT_TRUE(close(gpu_grad.logprobs[t], cpu_grad.logprobs[t])) << "variant " << v << " token " << t;
        ASSERT_TRUE(close(gpu_grad.values[t], cpu_grad.values[t])) << "variant " << v << " token " << t;
      }
      EXPECT_TRUE(close(gpu_loss.actor_loss, cpu_loss.actor_loss))
          << gpu_loss.actor_loss << " vs " << cpu_loss.actor_loss;
      EXPECT_TRUE(close(gpu_loss.value_loss, cpu_loss.value_loss))
          << gpu_loss.value_loss << " vs " << cpu_loss.value_loss;
      EXPECT_TRUE(close(gpu_loss.kl, cpu_loss.kl));
      EXPECT_TRUE(close(gpu_loss.clip_fraction, cpu_loss.clip_fraction));
    }
  }
}

TEST(LearnerCudaTest, MatchesCpuInDouble) {
  if (skip_without_device()) GTEST_SKIP() << "no CUDA device";
  compare_backends<double>(1e-6, 1'000'000);
}

TEST(LearnerCudaTest, MatchesCpuInFloat) {
  if (skip_without_device()) GTEST_SKIP() << "no CUDA device";
  compare_backends<float>(1e-4, 1'000'000);
}

TEST(LearnerCudaTest, FacadeMatchesCpu) {
  if (skip_without_device()) GTEST_SKIP() << "no CUDA device";
  const Batch b = testing::random_batch(5);
  const Advantages cpu = Learner(LearnerOptions{}, Backend::kCpu).advantages(b);
  const Advantages gpu = Learner(LearnerOptions{}, Backend::kCuda).advantages(b);
  for (int64_t t = 0; t < b.num_tokens(); ++t) EXPECT_NEAR(gpu.advantages[t], cpu.advantages[t], 1e-12);
}

// Learner::step on the device (advantages, normalizer and losses in one upload) against the CPU's fused step;
// 1e-9: the device sums in another order and has its own exp.
TEST(LearnerCudaTest, StepMatchesCpu) {
  if (skip_without_device()) GTEST_SKIP() << "no CUDA device";
  const Batch b = testing::random_batch(6);
  LearnerOptions o;
  o.kl_coef = 0.05;
  Advantages cpu_adv, gpu_adv;
  Gradients cpu_grads, gpu_grads;
  const LossResult cpu = Learner(o, Backend::kCpu).step(b, cpu_adv, &cpu_grads);
  const LossResult gpu = Learner(o, Backend::kCuda).step(b, gpu_adv, &gpu_grads);
  EXPECT_NEAR(gpu.policy_loss, cpu.policy_loss, 1e-9);
  EXPECT_NEAR(gpu.value_loss, cpu.value_loss, 1e-9);
  EXPECT_NEAR(gpu.kl, cpu.kl, 1e-9);
  ASSERT_EQ(gpu_adv.returns.size(), cpu_adv.returns.size());
  ASSERT_EQ(gpu_grads.logprobs.size(), cpu_grads.logprobs.size());
  for (int64_t t = 0; t < b.num_tokens(); ++t) {
    EXPECT_NEAR(gpu_adv.returns[t], cpu_adv.returns[t], 1e-9);
    EXPECT_NEAR(gpu_grads.logprobs[t], cpu_grads.logprobs[t], 1e-9);
    EXPECT_NEAR(gpu_grads.values[t], cpu_grads.values[t], 1e-9);
  }
}

}  // namespace
}  // namespace crl::learners
