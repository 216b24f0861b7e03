// Language-model policy throughput (policies/lm, issue 17), default size (~1M parameters), one core.
//   BM_LmTrainForwardBackward      forward + backward of the SFT loss over 4 sequences x 128 tokens;
//                                  items = tokens; counter GFLOPs = the matrix products' rate
//   BM_LmCudaTrainForwardBackward  the same step with the CUDA twin (skipped without a device)
//   BM_LmSampleCached              8 prompts of 16 tokens, 64 new tokens each with the KV cache
//                                  (temperature 1); items = new tokens
//   BM_LmCudaSampleCached/N        N such prompts with cuda_sample (skipped without a device)
//   BM_LmGemm/M/K/N                Eigen sgemm (row-major, as the model) at the model's shapes: the ceiling
//                                  training is compared against; counter GFLOPs
//   BM_LmTorchTrainForwardBackward the same model and batch in PyTorch (bench/lm_torch_bench.py, one thread),
//   BM_LmTorchSampleCached         measured in the same run; counter torch_tokens_per_second
//                                  (skipped where `import torch` fails)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "engine/rng.h"
#include "policies/lm/cpu/model.h"
#include "policies/lm/cpu/sampler.h"
#include "policies/lm/cuda/lm_cuda.h"

namespace crl::lm {
namespace {

constexpr int kSeqs = 4, kLen = 128;

PackedBatch make_batch(const LmConfig& c, int seqs, int len) {
  Rng rng(StreamKey{1, 0, 0, StreamRole::kLearner, 0});
  PackedBatch b;
  for (int s = 0; s < seqs; ++s) {
    std::vector<int32_t> seq(len);
    for (int32_t& t : seq) t = static_cast<int32_t>(rng.uniform_int(c.vocab));
    b.add_sequence(seq);
  }
  return b;
}

// Multiply-adds x 2 of the training step's matrix products (forward 1x, backward 2x) for T tokens in
// sequences of n: linear layers, the tied output layer and the attention products.
double train_flops(const LmConfig& c, int T, int n) {
  const double d = c.d_model, ff = c.d_ff;
  const double linear = c.layers * (3 * d * d + d * d + 2 * d * ff) + c.vocab * d;
  const double attention = c.layers * 2.0 * n * d;  // QK^T and PV, full square per token
  return 3.0 * 2.0 * T * (linear + attention);
}

void BM_LmTrainForwardBackward(benchmark::State& state) {
  LmModel m;
  m.initialize(1);
  const PackedBatch b = make_batch(m.config(), kSeqs, kLen);
  const std::vector<float> mask(b.size(), 1.0f), dvalue(b.size(), 0.01f);
  std::vector<float> dlogp;
  for (auto _ : state) {
    const ForwardResult f = m.forward(b);
    sft_loss(b, f, mask, dlogp);
    benchmark::DoNotOptimize(m.backward(b, f, dlogp, dvalue));
  }
  state.SetItemsProcessed(state.iterations() * b.size());
  state.counters["GFLOPs"] = benchmark::Counter(
      train_flops(m.config(), b.size(), kLen) * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

// BM_LmSampleCached's requests: `count` prompts of 16 random tokens, each its own stream.
std::vector<SampleRequest> sample_requests(const LmConfig& c, int count) {
  const PackedBatch prompts = make_batch(c, count, 16);
  std::vector<SampleRequest> requests;
  for (int s = 0; s < prompts.sequences(); ++s)
    requests.push_back(SampleRequest{std::vector<int32_t>(prompts.tokens.begin() + prompts.offsets[s],
                                                          prompts.tokens.begin() + prompts.offsets[s + 1]),
                                     StreamKey{2, static_cast<uint64_t>(s), 0, StreamRole::kExecute, 0}});
  return requests;
}

template <typename Sample>
void run_sampling(benchmark::State& state, int count, const Sample& sample_fn) {
  LmModel m;
  m.initialize(1);
  const std::vector<SampleRequest> requests = sample_requests(m.config(), count);
  SamplingParams p;
  p.max_new_tokens = 64;
  int64_t tokens = 0;
  for (auto _ : state) {
    const std::vector<SampleResult> out = sample_fn(m, requests, p);
    for (const SampleResult& r : out) tokens += static_cast<int64_t>(r.tokens.size());
  }
  state.SetItemsProcessed(tokens);
}

void BM_LmSampleCached(benchmark::State& state) {
  run_sampling(state, 8, [](const LmModel& m, std::span<const SampleRequest> r, const SamplingParams& p) {
    return sample(m, r, p);
  });
}

// The same on the device (cuda_sample), 8 and 64 requests: a round's rows share their GEMMs there.
void BM_LmCudaSampleCached(benchmark::State& state) {
  std::string why;
  if (!lm_cuda_available(&why)) {
    state.SkipWithError(("CUDA not measured: " + why).c_str());
    return;
  }
  run_sampling(state, static_cast<int>(state.range(0)),
               [](const LmModel& m, std::span<const SampleRequest> r, const SamplingParams& p) {
                 return cuda_sample(m, r, p);
               });
}

void BM_LmGemm(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), K = static_cast<int>(state.range(1)),
            N = static_cast<int>(state.range(2));
  const RowMatrix a = RowMatrix::Random(M, K), b = RowMatrix::Random(K, N);
  RowMatrix c(M, N);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * M * K * N * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

// Runs bench/lm_torch_bench.py once (it times itself for a few seconds) and reports its rate.
void torch_baseline(benchmark::State& state, const std::string& mode) {
  const LmConfig c;
  const std::string args = mode == "train" ? std::to_string(kSeqs) + " " + std::to_string(kLen) : "8 16 64";
  const std::string cmd = "/usr/bin/python3 " CRL_SOURCE_DIR "/bench/lm_torch_bench.py " + mode + " " +
                          std::to_string(c.vocab) + " " + std::to_string(c.d_model) + " " +
                          std::to_string(c.heads) + " " + std::to_string(c.layers) + " " +
                          std::to_string(c.d_ff) + " " + std::to_string(c.max_positions) + " " + args +
                          (mode == "train" ? " 0" : "") + " 3 2>&1";
  double rate = 0.0;
  std::string output;
  for (auto _ : state) {
    FILE* pipe = popen(cmd.c_str(), "r");
    if (pipe == nullptr) break;
    char line[512];
    while (fgets(line, sizeof line, pipe) != nullptr) {
      output += line;
      std::sscanf(line, "tokens_per_second %lf", &rate);
    }
    pclose(pipe);
  }
  if (rate <= 0.0) {
    state.SkipWithError(("PyTorch baseline unavailable: " + output).c_str());
    return;
  }
  state.counters["torch_tokens_per_second"] = rate;
}

// The same training step on the CUDA twin (policies/lm/cuda; includes uploads and the backward's recomputed
// forward); skipped where no device is usable.
void BM_LmCudaTrainForwardBackward(benchmark::State& state) {
  std::string why;
  if (!lm_cuda_available(&why)) {
    state.SkipWithError(("CUDA not measured: " + why).c_str());
    return;
  }
  LmModel m;
  m.initialize(1);
  const PackedBatch b = make_batch(m.config(), kSeqs, kLen);
  const std::vector<float> mask(b.size(), 1.0f), dvalue(b.size(), 0.01f);
  std::vector<float> dlogp;
  for (auto _ : state) {
    const ForwardResult f = cuda_forward(m, b);
    sft_loss(b, f, mask, dlogp);
    benchmark::DoNotOptimize(cuda_backward(m, b, dlogp, dvalue));
  }
  state.SetItemsProcessed(state.iterations() * b.size());
}

void BM_LmTorchTrainForwardBackward(benchmark::State& state) {
  torch_baseline(state, "train");
}
void BM_LmTorchSampleCached(benchmark::State& state) {
  torch_baseline(state, "sample");
}

// Rotary positions at the synthetic_tinylm shape (head_dim 16, 2 heads, q and k): every position of a
// 1,024-token context rotated, from the angles (pow, sin, cos per pair: the code before the table) and
// from the model's table (same bits; tests/policies/lm LmModel.RopeTableRotatesWithTheSameBitsAsTheAngles).
constexpr int kRopeHeadDim = 16, kRopeVectors = 4, kRopePositions = 1024;

void BM_LmRopeAngles(benchmark::State& state) {
  std::vector<float> v(kRopeVectors * kRopeHeadDim, 0.5f);
  for (auto _ : state) {
    for (int p = 0; p < kRopePositions; ++p) {
      for (int h = 0; h < kRopeVectors; ++h)
        crl::lm::rope_rotate(v.data() + h * kRopeHeadDim, kRopeHeadDim, p);
    }
    benchmark::DoNotOptimize(v.data());
  }
  state.SetItemsProcessed(state.iterations() * kRopePositions);
}

void BM_LmRopeTable(benchmark::State& state) {
  const crl::lm::RopeTable table(kRopeHeadDim, kRopePositions);
  std::vector<float> v(kRopeVectors * kRopeHeadDim, 0.5f);
  for (auto _ : state) {
    for (int p = 0; p < kRopePositions; ++p) {
      for (int h = 0; h < kRopeVectors; ++h) table.rotate(v.data() + h * kRopeHeadDim, p);
    }
    benchmark::DoNotOptimize(v.data());
  }
  state.SetItemsProcessed(state.iterations() * kRopePositions);
}

BENCHMARK(BM_LmTrainForwardBackward)->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_LmSampleCached)->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_LmRopeAngles)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmRopeTable)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmCudaTrainForwardBackward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LmCudaSampleCached)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond);
// Training's shapes: (tokens x d)(d x 3d), (tokens x d)(d x d_ff), (tokens x d)(d x vocab).
BENCHMARK(BM_LmGemm)
    ->Args({512, 128, 384})
    ->Args({512, 128, 512})
    ->Args({512, 512, 128})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmTorchTrainForwardBackward)->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_LmTorchSampleCached)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace crl::lm
