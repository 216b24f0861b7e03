// The neural network's CUDA twin against the CPU reference (Eigen): forward (log-probs, values, scores) and
// backward (every parameter's gradient) on random decision batches, and a critic + actor update of the whole
// policy on each back-end (network and learner losses on the device). Skipped, with the reason, where no CUDA
// device is present.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/error.h"
#include "engine/rng.h"
#include "engine/runner.h"
#include "envs/registry.h"
#include "learners/batch.h"
#include "policies/neural/cuda/network_cuda.h"
#include "policies/neural/network.h"
#include "policies/neural/neural_policy.h"
#include "policies/rollout.h"

namespace crl::neural {
namespace {

DecisionBatch random_batch(int inputs, int groups, uint64_t seed) {
  Rng rng(StreamKey{seed, 0, 0, StreamRole::kLearner, 3});
  DecisionBatch b;
  for (int g = 0; g < groups; ++g) {
    const int n = 1 + static_cast<int>(rng.uniform_int(17));
    b.offsets.push_back(b.offsets.back() + n);
    b.chosen.push_back(static_cast<int>(rng.uniform_int(n)));
  }
  b.x.resize(b.offsets.back(), inputs);
  for (Eigen::Index i = 0; i < b.x.size(); ++i) b.x.data()[i] = rng.uniform_float() < 0.2f ? 1.0f : 0.0f;
  return b;
}

double max_error(std::span<const float> a, std::span<const float> b, double scale) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / scale);
  return worst;
}

TEST(NeuralCuda, BuildWithoutDeviceReportsWhy) {
  std::string why;
  if (network_cuda_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(why.empty());
  Network net(NetworkShape{4, 3});
  EXPECT_THROW(cuda_forward(net, random_batch(4, 2, 1)), Error);
}

TEST(NeuralCuda, ForwardAndBackwardMatchTheCpu) {
  std::string why;
  if (!network_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (const auto& [inputs, hidden, groups] :
       {std::tuple{99, 64, 300}, std::tuple{13, 8, 1}, std::tuple{99, 128, 2000}}) {
    Network net(NetworkShape{inputs, hidden});
    net.initialize(17, 0);
    Rng rng(StreamKey{2, 0, 0, StreamRole::kLearner, 4});
    for (int64_t i = net.shape().b1(); i < net.shape().size(); ++i) {
      net.parameters()[i] = rng.uniform_float() - 0.5f;
    }
    const DecisionBatch b = random_batch(inputs, groups, 5);
    const ForwardResult cpu = net.forward(b);
    const ForwardResult gpu = cuda_forward(net, b);
    EXPECT_LT(max_error(cpu.logp, gpu.logp, 1.0), 1e-4);
    EXPECT_LT(max_error(cpu.values, gpu.values, 1.0), 1e-4);
    EXPECT_LT(max_error(cpu.probs, gpu.probs, 1.0), 1e-5);
    std::vector<float> dlogp(groups), dvalue(groups);
    for (int g = 0; g < groups; ++g) {
      dlogp[g] = rng.uniform_float() - 0.5f;
      dvalue[g] = rng.uniform_float() - 0.5f;
    }
    const std::vector<float> g_cpu = net.backward(b, cpu, dlogp, dvalue);
    const std::vector<float> g_gpu = cuda_backward(net, b, gpu, dlogp, dvalue);
    double scale = 1e-6;
    for (float v : g_cpu) scale = std::max(scale, double(std::fabs(v)));
    EXPECT_LT(max_error(g_cpu, g_gpu, scale), 1e-4) << inputs << "x" << hidden << ", " << groups << " groups";
    // Same inputs, same bits: the device reductions run in a fixed order.
    EXPECT_EQ(cuda_backward(net, b, gpu, dlogp, dvalue), g_gpu);
  }
}

// The policy's network has a shared trunk and four heads; the CUDA twin implements one head, so the policy
// refuses backend: cuda with a typed error (rather than train with other numbers than the CPU's), device or
// not, and the twin itself refuses a multi-head network.
TEST(NeuralCuda, SharedTrunkPolicyRefusesTheCudaBackend) {
  std::unique_ptr<Env> env = make_env("synthetic", {{"view", "symbolic"}, {"split", "train"}});
  const auto codec = make_codec("symbolic", env->spec());
  NeuralConfig config;
  config.backend = learners::Backend::kCuda;
  try {
    NeuralPolicy policy(PolicyTarget{&env->spec(), codec}, config);
    FAIL() << "backend cuda was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "backend");
    EXPECT_NE(std::string(e.what()).find("shared-trunk"), std::string::npos) << e.what();
  }
  Network net(NetworkShape{4, 3, 2});
  EXPECT_THROW(cuda_forward(net, random_batch(4, 2, 1)), Error);
}

}  // namespace
}  // namespace crl::neural
