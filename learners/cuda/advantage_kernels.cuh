#pragma once
// The advantage kernels of the CUDA learner (included only by cuda_learner.cu); CPU twin:
// cpu/cpu_learner.cpp.
//   1. token_segment:  token -> segment index (binary search over the segment offsets).
//   2. segment_stats:  per segment, n_s (critic tokens), actor tokens, first and last sampled position.
//   3. rollout_walk:   one thread per rollout walks its (few) segments backwards: N_after, lambda_s, the
//                      correction factor in log space, the stitched bootstrap. O(segments), not O(tokens).
//   4. gae_reduce:     reduce-then-scan, pass 1: each block composes the GAE maps of its chunk (gae_scan.h).
//   5. chunk_suffix:   one block scans the chunk aggregates from the right (exclusive suffix).
//   6. gae_apply:      each block re-reads its chunk, seeds it with the state flowing in from the right and
//                      writes advantages and returns in one sweep.
#include <cmath>

#include "learners/cuda/kernel_common.cuh"
#include "learners/gae_scan.h"

namespace crl::learners::cuda {

// Internal linkage on purpose: included only by cuda_learner.cu, one translation unit, as before the split.
namespace {

__device__ double device_lambda(const KernelOptions& o, int64_t n) {
  if (o.lambda_mode == static_cast<int>(LambdaMode::kFixed)) return o.lambda;
  const double length = static_cast<double>(n > 1 ? n : 1);
  return 1.0 - 1.0 / (o.alpha * length);
}

__device__ double device_log_discount(double gamma, double lambda) {
  if (gamma <= 0.0 || lambda <= 0.0) return -INFINITY;
  return log(gamma) + log(lambda);
}

// ---- 1. token -> segment ----
__global__ void token_segment_kernel(const int64_t* seg_offsets, int64_t num_segments, int64_t num_tokens,
                                     int* token_segment) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= num_tokens) return;
  // upper_bound(seg_offsets, t) - 1: the last segment starting at or before t (skips empty segments).
  int64_t lo = 0, hi = num_segments + 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (seg_offsets[mid] <= t) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  token_segment[t] = static_cast<int>(lo - 1);
}

// ---- 2. per-segment counts and sampled range ----
__global__ void segment_stats_kernel(const int64_t* seg_offsets, int64_t num_segments, const uint8_t* actor,
                                     const uint8_t* critic, int64_t* n_critic, int64_t* n_actor,
                                     int64_t* first_pos, int64_t* last_pos) {
  __shared__ int64_t shared[kThreads];
  for (int64_t s = blockIdx.x; s < num_segments; s += gridDim.x) {
    const int64_t begin = seg_offsets[s], end = seg_offsets[s + 1];
    int64_t nc = 0, na = 0, first = INT64_MAX, last = -1;
    for (int64_t t = begin + threadIdx.x; t < end; t += kThreads) {
      nc += critic[t];
      na += actor[t];
      if (critic[t]) {
        first = min(first, t);
        last = max(last, t);
      }
    }
    nc = block_reduce(nc, shared, [](int64_t a, int64_t b) { return a + b; });
    na = block_reduce(na, shared, [](int64_t a, int64_t b) { return a + b; });
    first = block_reduce(first, shared, [](int64_t a, int64_t b) { return a < b ? a : b; });
    last = block_reduce(last, shared, [](int64_t a, int64_t b) { return a > b ? a : b; });
    if (threadIdx.x == 0) {
      n_critic[s] = nc;
      n_actor[s] = na;
      first_pos[s] = nc > 0 ? first : -1;
      last_pos[s] = last;
    }
  }
}

// ---- 3. one thread per rollout: N_after, lambda, factor, stitched bootstrap ----
template <typename T>
__global__ void rollout_walk_kernel(KernelOptions o, const int64_t* roll_offsets, int64_t num_rollouts,
                                    const T* rewards, const T* values, const int64_t* n_critic,
                                    const uint8_t* seg_kind, const int64_t* first_pos, int64_t* n_after,
                                    T* seg_lambda, T* seg_gl, T* seg_factor, T* seg_ret_scale, T* seg_c0,
                                    T* seg_reward) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= num_rollouts) return;
  const double reward = static_cast<double>(rewards[r]);
  int64_t later_tokens = 0;
  double later_log = 0.0;
  bool has_next = false;
  double next_first_value = 0.0;
  for (int64_t s = roll_offsets[r + 1] - 1; s >= roll_offsets[r]; --s) {
    const int64_t n = n_critic[s];
    const double lambda = device_lambda(o, n);
    const double log_gl = device_log_discount(o.gamma, lambda);
    double factor = 1.0;
    // The CPU learner's test (learners/options.h; constexpr, callable here with --expt-relaxed-constexpr).
    const bool applies = correction_applies(static_cast<CorrectionSegments>(o.correction_segments),
                                            seg_kind[s] == static_cast<uint8_t>(SegmentKind::kSummary));
    if (o.correction && applies && later_tokens > 0) {
      factor = o.lambda_mode == static_cast<int>(LambdaMode::kTokenwise)
                   ? exp(later_log)
                   : exp(static_cast<double>(later_tokens) * log_gl);
    }
    n_after[s] = later_tokens;
    seg_lambda[s] = static_cast<T>(lambda);
    seg_gl[s] = static_cast<T>(o.gamma * lambda);
    seg_factor[s] = static_cast<T>(factor);
    seg_ret_scale[s] =
        static_cast<T>(o.critic_target == static_cast<int>(CriticTarget::kCorrected) ? factor : 1.0);
    seg_c0[s] = static_cast<T>(o.critic_target == static_cast<int>(CriticTarget::kStitched) && has_next
                                   ? o.gamma * next_first_value - reward
                                   : 0.0);
    seg_reward[s] = static_cast<T>(reward);
    if (n > 0) {
      has_next = true;
      next_first_value = static_cast<double>(values[first_pos[s]]);
      later_log += static_cast<double>(n) * log_gl;
    }
    later_tokens += n;
  }
}

// The GAE map of token t (gae_scan.h).
template <typename T>
__device__ GaeMap<T> token_map(int64_t t, T gamma, const T* values, const uint8_t* critic,
                               const int* token_segment, const int64_t* last_pos, const T* seg_gl,
                               const T* seg_reward, const T* seg_c0) {
  const int s = token_segment[t];
  return gae_token_map<T>(critic[t] != 0, last_pos[s] == t, values[t], gamma, seg_gl[s], seg_reward[s],
                          seg_c0[s]);
}

// Exclusive suffix scan of one map per thread in shared memory (Hillis-Steele, log2(threads) steps):
// returns F_{j+1} o ... o F_{n-1} for thread j (identity for the last), and the whole composition in *total.
template <typename T, int kN>
__device__ GaeMap<T> block_suffix(GaeMap<T> mine, GaeMap<T>* shared, GaeMap<T>* total) {
  const int j = threadIdx.x;
  shared[j] = mine;
  __syncthreads();
  for (int d = 1; d < kN; d *= 2) {
    GaeMap<T> x = shared[j];
    if (j + d < kN) x = gae_compose(x, shared[j + d]);
    __syncthreads();
    shared[j] = x;
    __syncthreads();
  }
  const GaeMap<T> incoming = j + 1 < kN ? shared[j + 1] : gae_identity<T>();
  if (total) *total = shared[0];
  __syncthreads();
  return incoming;
}

// ---- 4. per-chunk aggregate ----
// The composed map of one thread's kItemsPerThread tokens starting at `begin`, right to left (the reduce and
// the apply passes must compose exactly the same maps).
template <typename T>
__device__ GaeMap<T> thread_map(int64_t begin, int64_t num_tokens, T gamma, const T* values,
                                const uint8_t* critic, const int* token_segment, const int64_t* last_pos,
                                const T* seg_gl, const T* seg_reward, const T* seg_c0) {
  GaeMap<T> f = gae_identity<T>();
  for (int k = kItemsPerThread - 1; k >= 0; --k) {
    const int64_t t = begin + k;
    if (t < num_tokens) {
      f = gae_compose(
          token_map(t, gamma, values, critic, token_segment, last_pos, seg_gl, seg_reward, seg_c0), f);
    }
  }
  return f;
}

template <typename T>
__global__ void gae_reduce_kernel(int64_t num_tokens, T gamma, const T* values, const uint8_t* critic,
                                  const int* token_segment, const int64_t* last_pos, const T* seg_gl,
                                  const T* seg_reward, const T* seg_c0, GaeMap<T>* chunk_maps) {
  __shared__ GaeMap<T> shared[kThreads];
  const int64_t begin =
      static_cast<int64_t>(blockIdx.x) * kChunk + static_cast<int64_t>(threadIdx.x) * kItemsPerThread;
  const GaeMap<T> f = thread_map(begin, num_tokens, gamma, values, critic, token_segment, last_pos, seg_gl,
                                 seg_reward, seg_c0);
  GaeMap<T> total;
  block_suffix<T, kThreads>(f, shared, &total);
  if (threadIdx.x == 0) chunk_maps[blockIdx.x] = total;
}

// ---- 5. exclusive suffix over chunk aggregates: the state flowing into each chunk from the right ----
template <typename T>
__global__ void chunk_suffix_kernel(const GaeMap<T>* chunk_maps, int64_t num_chunks, GaeState<T>* chunk_in) {
  __shared__ GaeMap<T> shared[kSuffixThreads];
  const int64_t per = (num_chunks + kSuffixThreads - 1) / kSuffixThreads;
  const int64_t begin = threadIdx.x * per, end = min(begin + per, num_chunks);
  GaeMap<T> f = gae_identity<T>();
  for (int64_t c = end - 1; c >= begin; --c) f = gae_compose(chunk_maps[c], f);
  GaeMap<T> incoming = block_suffix<T, kSuffixThreads>(f, shared, nullptr);
  // Walk this thread's chunks from the right, handing each the state after it (starting from state 0).
  const GaeState<T> zero{T(0), T(0), T(0)};
  for (int64_t c = end - 1; c >= begin; --c) {
    chunk_in[c] = gae_apply(incoming, zero);
    incoming = gae_compose(chunk_maps[c], incoming);
  }
}

// ---- 6. apply: advantages and returns ----
template <typename T>
__global__ void gae_apply_kernel(int64_t num_tokens, T gamma, const T* values, const uint8_t* critic,
                                 const int* token_segment, const int64_t* last_pos, const T* seg_gl,
                                 const T* seg_reward, const T* seg_c0, const T* seg_factor,
                                 const T* seg_ret_scale, const GaeState<T>* chunk_in, bool zero_nonpositive,
                                 T* adv, T* ret) {
  __shared__ GaeMap<T> shared[kThreads];
  const int64_t begin =
      static_cast<int64_t>(blockIdx.x) * kChunk + static_cast<int64_t>(threadIdx.x) * kItemsPerThread;
  const GaeMap<T> f = thread_map(begin, num_tokens, gamma, values, critic, token_segment, last_pos, seg_gl,
                                 seg_reward, seg_c0);
  const GaeMap<T> incoming = block_suffix<T, kThreads>(f, shared, nullptr);
  GaeState<T> state = gae_apply(incoming, chunk_in[blockIdx.x]);
  for (int k = kItemsPerThread - 1; k >= 0; --k) {
    const int64_t t = begin + k;
    if (t >= num_tokens) continue;
    state = gae_apply(
        token_map(t, gamma, values, critic, token_segment, last_pos, seg_gl, seg_reward, seg_c0), state);
    const int s = token_segment[t];
    const T v = values[t];
    if (critic[t]) {
      const bool zero = zero_nonpositive && seg_reward[s] <= T(0);
      adv[t] = zero ? T(0) : seg_factor[s] * state.a;
      ret[t] = seg_ret_scale[s] * state.a + state.c + v;
    } else {
      adv[t] = T(0);
      ret[t] = v;
    }
  }
}

}  // namespace
}  // namespace crl::learners::cuda
