// The language model's CUDA twin (policies/lm/cuda/) against the CPU reference (policies/lm/cpu/): logits,
// log-probs, values and every parameter tensor's gradient on random weights and a packed batch whose
// sequences include lengths 0 and 1, in both value-head modes and at sizes that exercise the kernels' strided
// loops (sequences longer than a block, head_dim above a block). Where no device is usable (or the build has
// no CUDA), LmCuda.* skips with the reason; scripts/gpu_check.sh runs it on a GPU machine and fails on a
// skip. LmCudaNoDevice.* checks the errors on machines without a device (the batch checks run on every
// machine).
#include "policies/lm/cuda/lm_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "lm_test_util.h"

namespace crl::lm {
namespace {

// Mismatches of ours against ref (the CPU): |a - r| > rel |r| + floor, floor = rel * max|ref| / 10, as in
// lm_torch_test.cpp (entries tiny next to the tensor's scale are compared absolutely).
int mismatches(const std::string& name, const float* ours, const float* ref, size_t n, double rel,
               std::string* first) {
  double scale = 0.0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
  const double floor = rel * scale / 10.0 + 1e-30;
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double diff = std::abs(static_cast<double>(ours[i]) - ref[i]);
    if (!(diff <= rel * std::abs(static_cast<double>(ref[i])) + floor)) {  // NaN counts as a mismatch
      if (bad++ == 0)
        *first = name + "[" + std::to_string(i) + "]: cuda " + std::to_string(ours[i]) + " cpu " +
                 std::to_string(ref[i]);
    }
  }
  return bad;
}

void compare(const LmModel& m, const PackedBatch& b) {
  const test::LossInputs in = test::make_loss_inputs(b.size());
  const ForwardResult cpu = m.forward(b);
  std::vector<float> dlogp;
  test::test_loss(b, cpu, in, dlogp);
  const std::vector<float> cpu_grad = m.backward(b, cpu, dlogp, in.dvalue);

  const ForwardResult gpu = cuda_forward(m, b);
  const std::vector<float> gpu_grad = cuda_backward(m, b, dlogp, in.dvalue);
  ASSERT_EQ(gpu.logits.size(), cpu.logits.size());
  ASSERT_EQ(gpu.logp.size(), cpu.logp.size());
  ASSERT_EQ(gpu_grad.size(), cpu_grad.size());
  constexpr double kRel = 1e-4;
  std::string first;
  EXPECT_EQ(mismatches("logits", gpu.logits.data(), cpu.logits.data(), cpu.logits.size(), kRel, &first), 0)
      << first;
  EXPECT_EQ(mismatches("logp", gpu.logp.data(), cpu.logp.data(), cpu.logp.size(), kRel, &first), 0) << first;
  EXPECT_EQ(mismatches("values", gpu.values.data(), cpu.values.data(), cpu.values.size(), kRel, &first), 0)
      << first;
  EXPECT_EQ(mismatches("hidden", gpu.hidden.data(), cpu.hidden.data(), cpu.hidden.size(), kRel, &first), 0)
      << first;
  for (const auto& [name, range] : test::named_tensors(m.config(), m.layout())) {
    const size_t n = static_cast<size_t>(range.second - range.first);
    EXPECT_EQ(mismatches(name, gpu_grad.data() + range.first, cpu_grad.data() + range.first, n, kRel, &first),
              0)
        << first;
  }
  // Same inputs, same bits (fixed-order reductions, no atomics).
  EXPECT_EQ(cuda_backward(m, b, dlogp, in.dvalue), gpu_grad);
}

TEST(LmCuda, ForwardAndEveryGradientMatchTheCpu) {
  std::string why;
  if (!lm_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "value_grad_to_trunk" : "detached value head");
    const LmConfig c = test::small_config(shared);
    compare(test::perturbed_model(c), test::make_batch(c, {5, 0, 1, 11, 7, 16}));
  }
}

// Sequences longer than a thread block (128) and head_dim above it, so the kernels' strided loops run.
TEST(LmCuda, LongSequencesAndWideHeadsMatchTheCpu) {
  std::string why;
  if (!lm_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (const auto& [d_model, heads, lengths] : {std::tuple{64, 4, std::vector<int>{200, 0, 1, 130, 3}},
                                                std::tuple{160, 1, std::vector<int>{1, 0, 40}}}) {
    LmConfig c = test::small_config(true);
    c.vocab = 300;
    c.d_model = d_model;
    c.heads = heads;
    c.d_ff = 96;
    c.max_positions = 256;
    SCOPED_TRACE("d_model " + std::to_string(d_model) + " heads " + std::to_string(heads));
    compare(test::perturbed_model(c), test::make_batch(c, lengths));
  }
}

TEST(LmCuda, EmptyBatchGivesEmptyResultsAndZeroGradient) {
  std::string why;
  if (!lm_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  const PackedBatch b = test::make_batch(c, {0, 0});
  EXPECT_EQ(cuda_forward(m, b).logits.rows(), 0);
  const std::vector<float> grad = cuda_backward(m, b, {}, {});
  EXPECT_EQ(grad, std::vector<float>(static_cast<size_t>(m.size()), 0.0f));
}

TEST(LmCudaNoDevice, AskingWithoutADeviceIsAClearError) {
  std::string why;
  if (lm_cuda_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(why.empty());
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  const PackedBatch b = test::make_batch(c, {3, 1});
  const std::vector<float> zeros(b.size(), 0.0f);
  for (int call = 0; call < 2; ++call) {
    try {
      if (call == 0) cuda_forward(m, b);
      if (call == 1) cuda_backward(m, b, zeros, zeros);
      ADD_FAILURE() << "no error without a device";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("no CUDA device") != std::string::npos ||
                  what.find("built without CUDA") != std::string::npos)
          << what;
    }
  }
}

// Malformed input gets the CPU's own errors, before (and whether or not) a device is looked for.
// Rotary positions are CPU-only: the twin refuses such a model with or without a device rather than
// computing a different model.
TEST(LmCudaNoDevice, RopeModelsAreRefused) {
  LmConfig c = test::small_config();
  c.rope = true;
  const LmModel m = test::perturbed_model(c);
  const PackedBatch b = test::make_batch(c, {3, 1});
  const std::vector<float> zeros(b.size(), 0.0f);
  EXPECT_THROW(cuda_forward(m, b), std::invalid_argument);
  EXPECT_THROW(cuda_backward(m, b, zeros, zeros), std::invalid_argument);
}

TEST(LmCudaNoDevice, MalformedBatchesGetTheCpuErrors) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  auto cpu_message = [&](const PackedBatch& b) {
    try {
      m.forward(b);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::vector<PackedBatch> bad(4, test::make_batch(c, {3, 2}));
  bad[0].tokens[1] = c.vocab;                           // token out of range
  bad[1].targets[0] = -2;                               // target out of range
  bad[2].offsets.back() = 4;                            // offsets do not reach the token count
  bad[3] = test::make_batch(c, {c.max_positions + 1});  // too long
  for (const PackedBatch& b : bad) {
    const std::string expected = cpu_message(b);
    ASSERT_NE(expected, "no error");
    try {
      cuda_forward(m, b);
      ADD_FAILURE() << "accepted: " << expected;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
    const std::vector<float> zeros(b.size(), 0.0f);
    EXPECT_THROW(cuda_backward(m, b, zeros, zeros), std::invalid_argument);
  }
  const PackedBatch good = test::make_batch(c, {3, 2});
  const std::vector<float> short_grad(good.size() - 1, 0.0f), full(good.size(), 0.0f);
  EXPECT_THROW(cuda_backward(m, good, short_grad, full), std::invalid_argument);
}

}  // namespace
}  // namespace crl::lm
