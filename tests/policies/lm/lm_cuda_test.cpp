// The language model's CUDA twin (policies/lm/cuda/) against the CPU reference (policies/lm/cpu/): logits,
// log-probs, values and every parameter tensor's gradient on random weights and a packed batch whose
// sequences include lengths 0 and 1, in both value-head modes and at sizes that exercise the kernels' strided
// loops (sequences longer than a block, head_dim above a block), with learned and with rotary positions.
// Where no device is usable (or the build has no CUDA), LmCuda.* skips with the reason; scripts/gpu_check.sh
// runs it on a GPU machine and fails on a skip. LmCudaNoDevice.* checks the errors on machines without a
// device (the batch checks run on every machine).
#include "policies/lm/cuda/lm_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "lm_test_util.h"

namespace crl::lm {
namespace {

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
  EXPECT_EQ(test::mismatches("logits", gpu.logits.data(), cpu.logits.data(), cpu.logits.size(), kRel, &first),
            0)
      << first;
  EXPECT_EQ(test::mismatches("logp", gpu.logp.data(), cpu.logp.data(), cpu.logp.size(), kRel, &first), 0)
      << first;
  EXPECT_EQ(test::mismatches("values", gpu.values.data(), cpu.values.data(), cpu.values.size(), kRel, &first),
            0)
      << first;
  EXPECT_EQ(test::mismatches("hidden", gpu.hidden.data(), cpu.hidden.data(), cpu.hidden.size(), kRel, &first),
            0)
      << first;
  for (const auto& [name, range] : test::named_tensors(m.config(), m.layout())) {
    const size_t n = static_cast<size_t>(range.second - range.first);
    EXPECT_EQ(
        test::mismatches(name, gpu_grad.data() + range.first, cpu_grad.data() + range.first, n, kRel, &first),
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
    for (bool rope : {false, true}) {
      SCOPED_TRACE(std::string(shared ? "value_grad_to_trunk" : "detached value head") +
                   (rope ? ", rotary positions" : ", learned positions"));
      LmConfig c = test::small_config(shared);
      c.rope = rope;
      compare(test::perturbed_model(c), test::make_batch(c, {5, 0, 1, 11, 7, 16}));
    }
  }
}

// Sequences longer than a thread block (128) and head_dim above it, so the kernels' strided loops run.
TEST(LmCuda, LongSequencesAndWideHeadsMatchTheCpu) {
  std::string why;
  if (!lm_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (const auto& [d_model, heads, lengths, rope] :
       {std::tuple{64, 4, std::vector<int>{200, 0, 1, 130, 3}, false},
        std::tuple{160, 1, std::vector<int>{1, 0, 40}, false},
        std::tuple{64, 4, std::vector<int>{3, 200, 0, 130}, true},
        std::tuple{160, 1, std::vector<int>{40, 1}, true}}) {
    LmConfig c = test::small_config(true);
    c.vocab = 300;
    c.d_model = d_model;
    c.heads = heads;
    c.d_ff = 96;
    c.max_positions = 256;
    c.rope = rope;
    SCOPED_TRACE("d_model " + std::to_string(d_model) + " heads " + std::to_string(heads) +
                 (rope ? " rope" : ""));
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

// A model for the sampling tests: max_positions 48, so that prompts and samples reach the end of the
// context, and the attention's loop over cached positions has more than one round per thread.
LmConfig sampling_config(bool rope = false) {
  LmConfig c = test::small_config();
  c.max_positions = 48;
  c.rope = rope;
  return c;
}

// The device decoder's logits against the CPU's KvCache, fed the same tokens: slots advanced in rounds of
// different sizes (one slot alone, all of them, some), up to the end of the context; learned and rotary
// positions (the rotation before the cache keeps a key, at each slot's own position).
void check_decoder(bool rope) {
  SCOPED_TRACE(rope ? "rotary positions" : "learned positions");
  const LmConfig c = sampling_config(rope);
  const LmModel m = test::perturbed_model(c);
  constexpr int kSlots = 3;
  const std::unique_ptr<TokenDecoder> gpu = cuda_decoder(m, kSlots);
  std::vector<KvCache> cpu(kSlots, KvCache(c));
  std::vector<RowVector> logits(kSlots);
  Rng rng(StreamKey{3, 0, 0, StreamRole::kLearner, 0});
  int compared = 0;
  std::string first;
  for (int round = 0; gpu->length(kSlots - 1) < c.max_positions; ++round) {
    std::vector<int> slots;
    for (int s = 0; s < kSlots; ++s) {
      // slot 0 every round, slot 1 every other round, slot 2 every third: rows of 1-3 per round.
      if (round % (s + 1) == 0 && gpu->length(s) < c.max_positions) slots.push_back(s);
    }
    if (slots.empty()) continue;
    std::vector<int32_t> tokens;
    for (size_t i = 0; i < slots.size(); ++i)
      tokens.push_back(static_cast<int32_t>(rng.uniform_int(c.vocab)));
    gpu->push(slots, tokens, logits);
    for (size_t i = 0; i < slots.size(); ++i) {
      const RowVector& ref = cpu[static_cast<size_t>(slots[i])].push(m, tokens[i]);
      const RowVector& ours = logits[static_cast<size_t>(slots[i])];
      ASSERT_EQ(ours.size(), ref.size());
      EXPECT_EQ(
          test::mismatches("logits", ours.data(), ref.data(), static_cast<size_t>(ref.size()), 1e-4, &first),
          0)
          << "round " << round << ", slot " << slots[i] << ": " << first;
      EXPECT_EQ(gpu->length(slots[i]), cpu[static_cast<size_t>(slots[i])].length());
      ++compared;
    }
  }
  EXPECT_EQ(gpu->length(0), c.max_positions);
  EXPECT_EQ(compared, kSlots * c.max_positions);
}

// cuda_sample against sample(): the same tokens, finish reasons and stops, log-probs (sampled, top and
// prompt) to float rounding, for greedy and sampled requests with prompts of 1 to max_positions tokens
// (the longest ends at the context); the same bits on a second call.
void check_sampling_against_cpu(bool rope) {
  SCOPED_TRACE(rope ? "rotary positions" : "learned positions");
  const LmConfig c = sampling_config(rope);
  const LmModel m = test::perturbed_model(c);
  std::vector<SampleRequest> requests;
  for (const int length : {1, 5, 17, 40, c.max_positions}) {
    SampleRequest r;
    for (int t = 0; t < length; ++t) r.prompt.push_back(static_cast<int32_t>((7 * t + length) % c.vocab));
    r.stream = StreamKey{11, static_cast<uint64_t>(length), 0, StreamRole::kExecute, 0};
    r.prompt_logprobs_from = length > 3 ? 2 : -1;
    requests.push_back(r);
  }
  for (const float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = 0.9f;
    p.max_new_tokens = 24;
    p.top_logprobs = 3;
    p.stop_ids = {5};
    const std::vector<SampleResult> cpu = sample(m, requests, p);
    const std::vector<SampleResult> gpu = cuda_sample(m, requests, p);
    ASSERT_EQ(gpu.size(), cpu.size());
    std::string first;
    for (size_t r = 0; r < cpu.size(); ++r) {
      EXPECT_EQ(gpu[r].tokens, cpu[r].tokens) << "temperature " << temperature << ", request " << r;
      EXPECT_EQ(gpu[r].finish, cpu[r].finish);
      if (gpu[r].tokens != cpu[r].tokens) continue;
      EXPECT_EQ(test::mismatches("logprobs", gpu[r].logprobs.data(), cpu[r].logprobs.data(),
                                 cpu[r].logprobs.size(), 1e-4, &first),
                0)
          << first;
      ASSERT_EQ(gpu[r].prompt_logprobs.size(), cpu[r].prompt_logprobs.size());
      for (size_t t = 0; t < cpu[r].prompt_logprobs.size(); ++t) {
        if (std::isnan(cpu[r].prompt_logprobs[t])) {
          EXPECT_TRUE(std::isnan(gpu[r].prompt_logprobs[t]));
        } else {
          EXPECT_NEAR(gpu[r].prompt_logprobs[t], cpu[r].prompt_logprobs[t],
                      1e-4 * (1.0 + std::abs(cpu[r].prompt_logprobs[t])));
        }
      }
      ASSERT_EQ(gpu[r].top.size(), cpu[r].top.size());
      for (size_t t = 0; t < cpu[r].top.size(); ++t)
        EXPECT_EQ(gpu[r].top[t][0].first, cpu[r].top[t][0].first);
    }
    EXPECT_EQ(cpu.back().finish, FinishReason::kContext) << "the full-context prompt samples one token";
    const std::vector<SampleResult> again = cuda_sample(m, requests, p);
    for (size_t r = 0; r < gpu.size(); ++r) {
      EXPECT_EQ(again[r].tokens, gpu[r].tokens);
      EXPECT_EQ(again[r].logprobs, gpu[r].logprobs) << "same requests, same bits";
    }
  }
  EXPECT_TRUE(cuda_sample(m, {}, SamplingParams{}).empty());
}

TEST(LmCuda, DecoderLogitsMatchTheCpuCache) {
  std::string why;
  if (!lm_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (const bool rope : {false, true}) check_decoder(rope);
}

TEST(LmCuda, SamplingMatchesTheCpu) {
  std::string why;
  if (!lm_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (const bool rope : {false, true}) check_sampling_against_cpu(rope);
}

// Sampling's bad input gets the CPU's errors before a device is looked for.
TEST(LmCudaNoDevice, SamplingChecksTheInputLikeTheCpu) {
  const LmConfig c = sampling_config();
  const LmModel m = test::perturbed_model(c);
  std::vector<SampleRequest> bad(1);
  bad[0].prompt = {1, c.vocab};
  SamplingParams p;
  std::string cpu;
  try {
    sample(m, bad, p);
  } catch (const std::invalid_argument& e) {
    cpu = e.what();
  }
  ASSERT_FALSE(cpu.empty());
  try {
    cuda_sample(m, bad, p);
    ADD_FAILURE() << "accepted: " << cpu;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), cpu);
  }
  bad[0].prompt = {1};
  p.top_p = 0.0f;
  EXPECT_THROW(cuda_sample(m, bad, p), std::invalid_argument);
  EXPECT_THROW(cuda_decoder(m, 0), std::invalid_argument);
}

TEST(LmCudaNoDevice, AskingWithoutADeviceIsAClearError) {
  std::string why;
  if (lm_cuda_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(why.empty());
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  const PackedBatch b = test::make_batch(c, {3, 1});
  const std::vector<float> zeros(b.size(), 0.0f);
  std::vector<SampleRequest> requests(1);
  requests[0].prompt = {1, 2};
  for (int call = 0; call < 4; ++call) {
    try {
      if (call == 0) cuda_forward(m, b);
      if (call == 1) cuda_backward(m, b, zeros, zeros);
      if (call == 2) cuda_sample(m, requests, SamplingParams{});
      if (call == 3) cuda_decoder(m, 2);
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
