// Learner throughput: CompactionRL advantages + token-normalized PPO/value losses with gradients, in
// tokens/s, at 1k, 100k and 10M tokens. Baseline in the same run: the NumPy implementation users write today
// (bench/baselines/numpy_advantages.py, a reverse loop over time per segment), on the same batch.
// CUDA rows (float, double) run when a device is present and are skipped with a message otherwise.
//
// The batch looks like CompactionRL data: rollouts of exec, summary, exec, ... segments; execution segments
// alternate sampled action spans (~120 tokens) with unsampled observations (~180 tokens); summaries are all
// sampled.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "engine/rng.h"
#include "learners/cpu/cpu_learner.h"
#include "learners/cuda/cuda_learner.h"
#include "learners/learner.h"

#ifndef CRL_SOURCE_DIR
#define CRL_SOURCE_DIR "."
#endif

namespace crl::learners {
namespace {

Batch make_bench_batch(int64_t tokens) {
  Rng rng(StreamKey{42, static_cast<uint64_t>(tokens), 0, StreamRole::kLearner, 0});
  // Segment lengths scale with the batch so that even 1k tokens has several rollouts and segments.
  const int64_t exec_len = std::max<int64_t>(16, std::min<int64_t>(4000, tokens / 16));
  const int64_t sum_len = std::max<int64_t>(4, exec_len / 10);
  Batch b;
  b.values.reserve(tokens);
  while (b.num_tokens() < tokens) {
    b.begin_rollout(rng.bernoulli(0.4) ? 1.0 : 0.0);
    const int segments = 1 + 2 * static_cast<int>(rng.uniform_int(4));  // 1, 3, 5 or 7: ends with execution
    for (int s = 0; s < segments && b.num_tokens() < tokens; ++s) {
      const bool summary = s % 2 == 1;
      const int64_t base = summary ? sum_len : exec_len;
      int64_t n = base / 2 + rng.uniform_int(static_cast<uint32_t>(base));
      n = std::min(n, tokens - b.num_tokens());
      std::vector<double> values(n);
      std::vector<uint8_t> mask(n);
      bool sampled = true;
      int64_t run = 0;
      for (int64_t t = 0; t < n; ++t) {
        if (!summary && run-- <= 0) {
          sampled = !sampled;
          run = sampled ? 60 + rng.uniform_int(120) : 90 + rng.uniform_int(180);
        }
        values[t] = rng.uniform();
        mask[t] = summary || sampled ? 1 : 0;
      }
      b.add_segment(summary ? SegmentKind::kSummary : SegmentKind::kExecution, values, mask, mask);
    }
  }
  const int64_t n = b.num_tokens();
  b.old_logprobs.resize(n);
  b.new_logprobs.resize(n);
  b.new_values.resize(n);
  for (int64_t t = 0; t < n; ++t) {
    b.old_logprobs[t] = -2.0 * rng.uniform();
    b.new_logprobs[t] = b.old_logprobs[t] + 0.4 * (rng.uniform() - 0.5);
    b.new_values[t] = b.values[t] + 0.2 * (rng.uniform() - 0.5);
  }
  b.validate();
  return b;
}

const Batch& bench_batch(int64_t tokens) {
  static std::map<int64_t, Batch> cache;
  auto it = cache.find(tokens);
  if (it == cache.end()) it = cache.emplace(tokens, make_bench_batch(tokens)).first;
  return it->second;
}

// Times `step` over a batch of `tokens` tokens (items = tokens). It runs a few times first: a trainer's
// buffers have been through the step before, and the first passes over freshly allocated memory are several
// times slower on the virtual machines we measure on (the host backs the pages lazily), which would otherwise
// dominate the one or two timed iterations at 10M tokens. Buffers are reused across iterations (as a trainer
// would), so the loop measures compute, not allocation.
template <class Step>
void time_step(benchmark::State& state, int64_t tokens, Step&& step) {
  for (int i = 0; i < 3; ++i) step();
  for (auto _ : state) {
    step();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * tokens);
}

// One full learner step on the CPU: advantages, normalizer, losses and gradients of the whole batch, fused
// into one pass over the tokens (Learner::step).
void BM_LearnerCpuAdvantagesLoss(benchmark::State& state) {
  const Batch& b = bench_batch(state.range(0));
  const LearnerOptions options;
  Advantages adv;
  LossNormalizer norm;
  Gradients grads;
  time_step(state, b.num_tokens(),
            [&] { benchmark::DoNotOptimize(cpu::compute_step(b, options, adv, norm, &grads)); });
}
BENCHMARK(BM_LearnerCpuAdvantagesLoss)
    ->Arg(1'000)
    ->Arg(100'000)
    ->Arg(10'000'000)
    ->Unit(benchmark::kMicrosecond);

// The same step as three calls (advantages, normalizer, losses over one micro-batch), as a trainer that
// splits the losses into micro-batches runs it: the same bits, two passes over the tokens.
void BM_LearnerCpuAdvantagesLossTwoPass(benchmark::State& state) {
  const Batch& b = bench_batch(state.range(0));
  const LearnerOptions options;
  Advantages adv;
  Gradients grads;
  grads.resize(b.num_tokens());
  time_step(state, b.num_tokens(), [&] {
    cpu::compute_advantages(b, options, adv);
    const LossNormalizer norm = cpu::make_normalizer(b, options);
    benchmark::DoNotOptimize(
        cpu::compute_losses(b, adv, norm, options, TokenRange{0, b.num_tokens()}, &grads));
  });
}
BENCHMARK(BM_LearnerCpuAdvantagesLossTwoPass)
    ->Arg(1'000)
    ->Arg(100'000)
    ->Arg(10'000'000)
    ->Unit(benchmark::kMicrosecond);

// Losses and gradients of the whole batch (one micro-batch) on one copy of the kernel.
void run_losses(benchmark::State& state, const Batch& b, cpu::Isa isa) {
  const LearnerOptions options;
  Advantages adv;
  cpu::compute_advantages(b, options, adv);
  const LossNormalizer norm = cpu::make_normalizer(b, options);
  Gradients grads;
  grads.resize(b.num_tokens());
  time_step(state, b.num_tokens(), [&] {
    benchmark::DoNotOptimize(
        cpu::compute_losses(b, adv, norm, options, TokenRange{0, b.num_tokens()}, &grads, isa));
  });
}

// The losses and gradients on each instruction-set copy of the kernel (arg 2: generic, AVX2, AVX-512; the
// same bits, tested), to show what the vector width buys.
void BM_LearnerCpuLossesIsa(benchmark::State& state) {
  const Batch& b = bench_batch(state.range(0));
  const std::vector<cpu::Isa> isas = cpu::supported_isas();
  if (state.range(1) >= static_cast<int64_t>(isas.size())) {
    state.SkipWithError("instruction set not supported by this CPU");
    return;
  }
  const cpu::Isa isa = isas[static_cast<size_t>(state.range(1))];
  state.SetLabel(std::string(cpu::isa_name(isa)));
  run_losses(state, b, isa);
}
BENCHMARK(BM_LearnerCpuLossesIsa)
    ->ArgsProduct({{100'000, 10'000'000}, {0, 1, 2}})
    ->ArgNames({"tokens", "isa"})
    ->Unit(benchmark::kMicrosecond);

// The estimator alone (steps 1-5), to separate its cost from the losses'.
void BM_LearnerCpuAdvantages(benchmark::State& state) {
  const Batch& b = bench_batch(state.range(0));
  const LearnerOptions options;
  Advantages adv;
  time_step(state, b.num_tokens(), [&] { cpu::compute_advantages(b, options, adv); });
}
BENCHMARK(BM_LearnerCpuAdvantages)->Arg(1'000)->Arg(100'000)->Arg(10'000'000)->Unit(benchmark::kMicrosecond);

// The losses and gradients alone (one micro-batch = the whole batch), on the widest kernel copy.
void BM_LearnerCpuLosses(benchmark::State& state) {
  run_losses(state, bench_batch(state.range(0)), cpu::supported_isas().back());
}
BENCHMARK(BM_LearnerCpuLosses)->Arg(1'000)->Arg(100'000)->Arg(10'000'000)->Unit(benchmark::kMicrosecond);

template <typename T>
void write_raw(const std::filesystem::path& path, const std::vector<T>& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(T)));
}

// The NumPy baseline on the same batch, timed inside Python in process CPU time (best of a few runs; one at
// 10M tokens, where a run takes seconds). Reports the time per run as manual time, so items/s compare
// directly with the rows above; max_abs_diff is the baseline's advantage error against ours.
void BM_NumpyBaselineAdvantagesLoss(benchmark::State& state) {
  const Batch& b = bench_batch(state.range(0));
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("crl_learner_bench_" + std::to_string(b.num_tokens()));
  std::filesystem::create_directories(dir);
  Advantages adv;
  cpu::compute_advantages(b, LearnerOptions{}, adv);
  write_raw(dir / "values.f64", b.values);
  write_raw(dir / "actor.u8", b.actor_mask);
  write_raw(dir / "critic.u8", b.critic_mask);
  write_raw(dir / "segment_offsets.i64", b.segment_offsets);
  write_raw(dir / "rollout_offsets.i64", b.rollout_offsets);
  write_raw(dir / "rewards.f64", b.rewards);
  write_raw(dir / "old_logprobs.f64", b.old_logprobs);
  write_raw(dir / "new_logprobs.f64", b.new_logprobs);
  write_raw(dir / "new_values.f64", b.new_values);
  write_raw(dir / "cpp_advantages.f64", adv.advantages);
  const int repeats = b.num_tokens() >= 10'000'000 ? 1 : 3;
  const std::string command = "/usr/bin/python3 " CRL_SOURCE_DIR
                              "/bench/baselines/numpy_advantages.py --dir " +
                              dir.string() + " --repeats " + std::to_string(repeats);
  double seconds = 0.0, diff = 0.0;
  for (auto _ : state) {
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe || std::fscanf(pipe, "seconds_per_run %lf max_abs_diff %lf", &seconds, &diff) != 2) {
      if (pipe) pclose(pipe);
      state.SkipWithError("the NumPy baseline did not run (needs /usr/bin/python3 with numpy)");
      break;
    }
    pclose(pipe);
    state.SetIterationTime(seconds);
  }
  std::filesystem::remove_all(dir);
  state.counters["max_abs_diff"] = diff;
  state.SetItemsProcessed(state.iterations() * b.num_tokens());
}
BENCHMARK(BM_NumpyBaselineAdvantagesLoss)
    ->Arg(1'000)
    ->Arg(100'000)
    ->Arg(10'000'000)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// The CUDA back-end with the batch resident on the device: advantages, normalizer, losses and gradients;
// compute_losses returns the loss sums to the host, so each iteration ends synchronized.
template <typename T>
void BM_LearnerCudaAdvantagesLoss(benchmark::State& state) {
  std::string why;
  if (!cuda_device_available(&why)) {
    state.SkipWithError(("CUDA not measured: " + why).c_str());
    for (auto _ : state) {
    }
    return;
  }
  const Batch& b = bench_batch(state.range(0));
  const LearnerOptions options;
  cuda::DeviceLearner<T> device;
  device.upload(b);
  device.compute_advantages(options);
  device.compute_normalizer(options);
  device.compute_losses(options, TokenRange{0, b.num_tokens()});
  for (auto _ : state) {
    device.compute_advantages(options);
    device.compute_normalizer(options);
    benchmark::DoNotOptimize(device.compute_losses(options, TokenRange{0, b.num_tokens()}));
  }
  state.SetItemsProcessed(state.iterations() * b.num_tokens());
  // Minimum DRAM traffic per token of one step (inputs read once, outputs written once): values, new values,
  // two log-probs, advantages, returns and two gradients in T, two mask bytes and a 4-byte segment index.
  state.SetBytesProcessed(state.iterations() * b.num_tokens() * static_cast<int64_t>(8 * sizeof(T) + 6));
}
BENCHMARK(BM_LearnerCudaAdvantagesLoss<float>)
    ->Name("BM_LearnerCudaFloatAdvantagesLoss")
    ->Arg(1'000)
    ->Arg(100'000)
    ->Arg(10'000'000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LearnerCudaAdvantagesLoss<double>)
    ->Name("BM_LearnerCudaDoubleAdvantagesLoss")
    ->Arg(1'000)
    ->Arg(100'000)
    ->Arg(10'000'000)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace crl::learners
