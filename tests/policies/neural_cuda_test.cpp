// The neural network's CUDA twin (policies/neural/cuda/) against the CPU reference (Network, Eigen): scores,
// probabilities, log-probs, entropies, hidden and pooled activations, values and every parameter tensor's
// gradient (W1, b1, each head's w_k, the head biases, wv, bv), float32, on random weights and decision
// batches with four heads, uneven group sizes and one-row groups, at sizes that use several blocks. Where no
// device is usable (or the build has no CUDA), NeuralCuda.* skips with the reason; scripts/gpu_check.sh runs
// it on a GPU machine and fails on a skip. NeuralCudaNoDevice.* checks the error on machines without one, and
// NeuralCudaChecks.* the batch checks on every machine.
// This file needs only network.cpp and the twin (no engine, no environment), so that
// tests/policies/neural_cuda_emulation.sh can compile it with the kernels as host code.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/rng.h"
#include "policies/neural/cuda/network_cuda.h"
#include "policies/neural/network.h"
#include "tests/float_mismatches.h"

namespace crl::neural {
namespace {

// Groups of the given sizes, each answered by the given head (heads empty: DecisionBatch::head stays empty,
// i.e. head 0), rows mixing 0/1 features and scalars (as the default and raw featurizers write).
DecisionBatch make_batch(int inputs, const std::vector<int>& sizes, const std::vector<int>& heads,
                         uint64_t seed) {
  Rng rng(StreamKey{seed, 0, 0, StreamRole::kLearner, 3});
  DecisionBatch b;
  for (size_t g = 0; g < sizes.size(); ++g) {
    b.offsets.push_back(b.offsets.back() + sizes[g]);
    b.chosen.push_back(static_cast<int>(rng.uniform_int(static_cast<uint64_t>(sizes[g]))));
  }
  b.head = heads;
  b.x.resize(b.offsets.back(), inputs);
  for (Eigen::Index r = 0; r < b.x.rows(); ++r) {
    for (int i = 0; i < inputs; ++i) {
      b.x(r, i) = i % 7 == 6 ? rng.uniform_float() : (rng.uniform_float() < 0.2f ? 1.0f : 0.0f);
    }
  }
  return b;
}

// `groups` groups of 1..max_size rows (every fifth a one-row group), heads drawn from [0, heads).
DecisionBatch random_batch(int inputs, int heads, int groups, int max_size, uint64_t seed) {
  Rng rng(StreamKey{seed, 0, 0, StreamRole::kLearner, 4});
  std::vector<int> sizes, head;
  for (int g = 0; g < groups; ++g) {
    sizes.push_back(g % 5 == 0 ? 1 : 1 + static_cast<int>(rng.uniform_int(static_cast<uint64_t>(max_size))));
    head.push_back(static_cast<int>(rng.uniform_int(static_cast<uint64_t>(heads))));
  }
  return make_batch(inputs, sizes, head, seed);
}

// A network with every parameter random (the heads, their biases and the value head too, so that every part
// of the gradient is non-trivial) and b1 centred so that about half the units are active.
Network random_network(NetworkShape shape, uint64_t seed) {
  Network net(shape);
  net.initialize(seed, 0);
  Rng rng(StreamKey{seed, 0, 0, StreamRole::kLearner, 5});
  for (int64_t i = shape.b1(); i < shape.size(); ++i) net.parameters()[i] = rng.uniform_float() - 0.5f;
  return net;
}

using crl::test::mismatches;  // tests/float_mismatches.h

constexpr double kRel = 1e-4;

#define EXPECT_MATCH(name, ours, ref, n)                                   \
  do {                                                                     \
    std::string first_;                                                    \
    EXPECT_EQ(mismatches(name, ours, ref, n, kRel, &first_), 0) << first_; \
  } while (false)

// Every tensor of the layout by name and [begin, end).
std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> tensors(const NetworkShape& s) {
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> out = {{"W1", {s.w1(), s.b1()}},
                                                                          {"b1", {s.b1(), s.w(0)}}};
  for (int k = 0; k < s.heads; ++k) out.push_back({"w" + std::to_string(k), {s.w(k), s.w(k + 1)}});
  out.push_back({"b", {s.b(0), s.wv()}});
  out.push_back({"wv", {s.wv(), s.bv()}});
  out.push_back({"bv", {s.bv(), s.size()}});
  return out;
}

// The comparison: forward, then the backward of a random loss, both sides.
void compare(const Network& net, const DecisionBatch& b, uint64_t seed) {
  const int groups = b.groups();
  const ForwardResult cpu = net.forward(b);
  const ForwardResult gpu = cuda_forward(net, b);
  ASSERT_EQ(gpu.scores.size(), cpu.scores.size());
  ASSERT_EQ(gpu.logp.size(), cpu.logp.size());
  ASSERT_EQ(gpu.entropy.size(), cpu.entropy.size());
  ASSERT_EQ(gpu.values.size(), cpu.values.size());
  ASSERT_EQ(gpu.hidden.size(), cpu.hidden.size());
  ASSERT_EQ(gpu.pooled.size(), cpu.pooled.size());
  EXPECT_MATCH("scores", gpu.scores.data(), cpu.scores.data(), cpu.scores.size());
  EXPECT_MATCH("probs", gpu.probs.data(), cpu.probs.data(), cpu.probs.size());
  EXPECT_MATCH("logp", gpu.logp.data(), cpu.logp.data(), cpu.logp.size());
  EXPECT_MATCH("entropy", gpu.entropy.data(), cpu.entropy.data(), cpu.entropy.size());
  EXPECT_MATCH("values", gpu.values.data(), cpu.values.data(), cpu.values.size());
  EXPECT_MATCH("hidden", gpu.hidden.data(), cpu.hidden.data(), static_cast<size_t>(cpu.hidden.size()));
  EXPECT_MATCH("pooled", gpu.pooled.data(), cpu.pooled.data(), static_cast<size_t>(cpu.pooled.size()));

  Rng rng(StreamKey{seed, 0, 0, StreamRole::kLearner, 6});
  std::vector<float> dlogp(groups), dvalue(groups);
  for (int g = 0; g < groups; ++g) {
    dlogp[g] = rng.uniform_float() - 0.5f;
    dvalue[g] = rng.uniform_float() - 0.5f;
  }
  const std::vector<float> cpu_grad = net.backward(b, cpu, dlogp, dvalue);
  const std::vector<float> gpu_grad = cuda_backward(net, b, gpu, dlogp, dvalue);
  ASSERT_EQ(gpu_grad.size(), cpu_grad.size());
  const NetworkShape& s = net.shape();
  for (const auto& [name, range] : tensors(s)) {
    if (name == "b") continue;
    const size_t n = static_cast<size_t>(range.second - range.first);
    EXPECT_MATCH(name, gpu_grad.data() + range.first, cpu_grad.data() + range.first, n);
  }
  // A head bias's gradient is sum_g dlogp_g sum_r (1[r = c_g] - p_r), zero up to rounding (each group's
  // terms cancel), so its relative error means nothing: it is compared with the size of what was summed.
  std::vector<double> summed(static_cast<size_t>(s.heads), 0.0);
  for (int g = 0; g < groups; ++g) {
    for (int r = b.offsets[g]; r < b.offsets[g + 1]; ++r) {
      const double indicator = r - b.offsets[g] == b.chosen[g] ? 1.0 : 0.0;
      summed[b.head_of(g)] += std::abs(dlogp[g] * (indicator - cpu.probs[r]));
    }
  }
  for (int k = 0; k < s.heads; ++k) {
    EXPECT_LE(std::abs(double(gpu_grad[s.b(k)]) - cpu_grad[s.b(k)]), kRel * summed[k] + 1e-30)
        << "b[" << k << "]: cuda " << gpu_grad[s.b(k)] << " cpu " << cpu_grad[s.b(k)];
  }
  // The device differentiates the CPU's forward too (its activations are uploaded), to the same numbers.
  const std::vector<float> from_cpu = cuda_backward(net, b, cpu, dlogp, dvalue);
  EXPECT_MATCH("gradient of the cpu forward", from_cpu.data(), cpu_grad.data(), cpu_grad.size());
  // Same inputs, same bits: fixed-order reductions, no atomics.
  const ForwardResult again = cuda_forward(net, b);
  EXPECT_EQ(again.logp, gpu.logp);
  EXPECT_EQ(again.values, gpu.values);
  EXPECT_EQ(cuda_backward(net, b, gpu, dlogp, dvalue), gpu_grad);
}

TEST(NeuralCuda, FourHeadsUnevenAndOneRowGroupsMatchTheCpu) {
  std::string why;
  if (!network_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  // Hand-made: one-row groups first, last and in between; every head; a group of 40 rows.
  {
    const Network net = random_network(NetworkShape{13, 8, 4}, 11);
    const DecisionBatch b =
        make_batch(13, {1, 3, 1, 1, 40, 2, 7, 1, 5, 1}, {3, 0, 2, 1, 3, 0, 2, 1, 1, 3}, 12);
    SCOPED_TRACE("13x8x4, 10 groups");
    compare(net, b, 13);
  }
  // The policy's sizes (about 100 inputs, 64 hidden), several blocks of groups and of rows x hidden.
  for (const auto& [inputs, hidden, groups, max_size] :
       {std::tuple{99, 64, 300, 33}, std::tuple{61, 128, 700, 17}}) {
    const Network net = random_network(NetworkShape{inputs, hidden, 4}, 17);
    const DecisionBatch b = random_batch(inputs, 4, groups, max_size, 18);
    SCOPED_TRACE(std::to_string(inputs) + "x" + std::to_string(hidden) + "x4, " + std::to_string(groups) +
                 " groups");
    compare(net, b, 19);
  }
}

// A single-head network and a batch without group heads (DecisionBatch::head empty: head 0), and a network
// with more heads than the batch uses (the unused heads' gradients are exactly 0 on both sides).
TEST(NeuralCuda, DefaultHeadAndUnusedHeadsMatchTheCpu) {
  std::string why;
  if (!network_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  {
    const Network net = random_network(NetworkShape{20, 16, 1}, 21);
    compare(net, make_batch(20, {4, 1, 9, 2}, {}, 22), 23);
  }
  const Network net = random_network(NetworkShape{20, 16, 4}, 24);
  const DecisionBatch b = make_batch(20, {4, 1, 9, 2}, {2, 2, 2, 2}, 25);
  compare(net, b, 26);
  const std::vector<float> dlogp(4, 0.5f), dvalue(4, 0.25f);
  const std::vector<float> grad = cuda_backward(net, b, cuda_forward(net, b), dlogp, dvalue);
  const NetworkShape& s = net.shape();
  for (int k : {0, 1, 3}) {  // (exactly: their columns of dS are 0)
    for (int64_t i = s.w(k); i < s.w(k + 1); ++i) EXPECT_EQ(grad[i], 0.0f) << "head " << k;
    EXPECT_EQ(grad[s.b(k)], 0.0f) << "head " << k;
  }
}

TEST(NeuralCuda, EmptyBatchGivesEmptyResultsAndZeroGradient) {
  std::string why;
  if (!network_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Network net = random_network(NetworkShape{5, 4, 4}, 31);
  DecisionBatch b;
  b.x.resize(0, 5);
  const ForwardResult f = cuda_forward(net, b);
  EXPECT_TRUE(f.logp.empty() && f.values.empty() && f.scores.empty());
  EXPECT_EQ(cuda_backward(net, b, f, {}, {}),
            std::vector<float>(static_cast<size_t>(net.shape().size()), 0.0f));
}

// Malformed batches fail the CPU's checks (CRL_CHECK: the batches are built by the policy, so a bad one is a
// bug of ours) on the host, before anything reaches a device: never an out-of-bounds read in a kernel.
TEST(NeuralCudaChecks, MalformedBatchesFailTheCpuChecksBeforeAnyLaunch) {
  const Network net = random_network(NetworkShape{6, 4, 4}, 41);
  const DecisionBatch bad_head = make_batch(6, {2, 3}, {0, 4}, 42);
  EXPECT_DEATH(cuda_forward(net, bad_head), "head 4 of 4");
  DecisionBatch bad_chosen = make_batch(6, {2, 3}, {0, 1}, 43);
  bad_chosen.chosen[1] = 3;
  EXPECT_DEATH(cuda_forward(net, bad_chosen), "group 1");
  DecisionBatch bad_offsets = make_batch(6, {2, 3}, {0, 1}, 44);
  bad_offsets.offsets.back() = 4;
  EXPECT_DEATH(cuda_forward(net, bad_offsets), "group offsets");
  DecisionBatch bad_heads = make_batch(6, {2, 3}, {0, 1}, 45);
  bad_heads.head.push_back(0);
  EXPECT_DEATH(cuda_forward(net, bad_heads), "group heads");
  const DecisionBatch good = make_batch(6, {2, 3}, {0, 1}, 46);
  const ForwardResult f = net.forward(good);
  const std::vector<float> two(2, 1.0f), three(3, 1.0f);
  EXPECT_DEATH(cuda_backward(net, good, f, three, two), "gradient sizes");
  EXPECT_DEATH(cuda_backward(net, make_batch(6, {2, 4}, {0, 1}, 47), f, two, two), "another batch");
}

TEST(NeuralCudaNoDevice, AskingWithoutADeviceIsAClearError) {
  std::string why;
  if (network_cuda_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(why.empty());
  const Network net = random_network(NetworkShape{6, 4, 4}, 51);
  try {
    cuda_forward(net, make_batch(6, {2, 3}, {0, 1}, 52));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "backend");
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace crl::neural
