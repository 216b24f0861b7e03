// CUDA back-end of the learner (see cuda_learner.h). Five kernels for the advantages, one fused kernel for
// the losses; every one has a CPU twin in cpu/cpu_learner.cpp, and tests/learners compare them.
//
// Advantages:
//   1. token_segment:  token -> segment index (binary search over the segment offsets).
//   2. segment_stats:  per segment, n_s (critic tokens), actor tokens, first and last sampled position.
//   3. rollout_walk:   one thread per rollout walks its (few) segments backwards: N_after, lambda_s, the
//                      correction factor in log space, the stitched bootstrap. O(segments), not O(tokens).
//   4. gae_reduce:     reduce-then-scan, pass 1: each block composes the GAE maps of its chunk (gae_scan.h).
//   5. chunk_suffix:   one block scans the chunk aggregates from the right (exclusive suffix).
//   6. gae_apply:      each block re-reads its chunk, seeds it with the state flowing in from the right and
//                      writes advantages and returns in one sweep.
// Losses: loss_kernel computes ratio, clipped surrogate, k3 KL, value loss and the gradients per token and
// reduces the weighted sums per block; sum_partials adds the block sums in a fixed order (deterministic).
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/error.h"
#include "learners/cpu/cpu_learner.h"
#include "learners/cuda/cuda_learner.h"
#include "learners/gae_scan.h"

namespace crl::learners::cuda {

namespace {

constexpr int kThreads = 256;       // threads per block of the token kernels
constexpr int kItemsPerThread = 8;  // tokens per thread in the scan: chunk = 2048 tokens
constexpr int kChunk = kThreads * kItemsPerThread;
constexpr int kSuffixThreads = 1024;
constexpr int kLossBlocks = 1024;  // fixed grid of the loss kernel, so the reduction order is fixed
constexpr int kSums = 5;           // policy, kl, value, clipped, value clipped

// A device array that only grows.
template <typename U>
struct DeviceBuffer {
  U* data = nullptr;
  size_t capacity = 0;
  size_t size = 0;
  ~DeviceBuffer() {
    if (data) cudaFree(data);
  }
  void resize(size_t n) {
    size = n;
    if (n <= capacity) return;
    if (data) CRL_CUDA_CHECK(cudaFree(data));
    data = nullptr;
    CRL_CUDA_CHECK(cudaMalloc(&data, n * sizeof(U)));
    capacity = n;
  }
  void upload(const U* host, size_t n) {
    resize(n);
    if (n) CRL_CUDA_CHECK(cudaMemcpy(data, host, n * sizeof(U), cudaMemcpyHostToDevice));
  }
  void download(U* host, size_t n) const {
    if (n) CRL_CUDA_CHECK(cudaMemcpy(host, data, n * sizeof(U), cudaMemcpyDeviceToHost));
  }
};

template <typename T>
void upload_converted(DeviceBuffer<T>& buffer, const std::vector<double>& host) {
  if constexpr (std::is_same_v<T, double>) {
    buffer.upload(host.data(), host.size());
  } else {
    std::vector<T> tmp(host.begin(), host.end());
    buffer.upload(tmp.data(), tmp.size());
  }
}

template <typename T>
void download_converted(const DeviceBuffer<T>& buffer, std::vector<double>& host, size_t n) {
  host.resize(n);
  if constexpr (std::is_same_v<T, double>) {
    buffer.download(host.data(), n);
  } else {
    std::vector<T> tmp(n);
    buffer.download(tmp.data(), n);
    for (size_t i = 0; i < n; ++i) host[i] = tmp[i];
  }
}

int blocks_for(int64_t n, int threads) {
  return static_cast<int>(std::max<int64_t>(1, (n + threads - 1) / threads));
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

// Block-wide sum / min / max of int64 through shared memory (blockDim.x == kThreads).
template <typename Op>
__device__ int64_t block_reduce(int64_t x, int64_t* shared, Op op) {
  shared[threadIdx.x] = x;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const int64_t result = shared[0];
  __syncthreads();
  return result;
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

// Options the kernels need, by value.
struct KernelOptions {
  double gamma, lambda, alpha, clip_epsilon, value_clip, kl_coef;
  int lambda_mode;    // LambdaMode
  int critic_target;  // CriticTarget
  bool correction, summary_loss_masked, positive_only;
};

__device__ double device_lambda(const KernelOptions& o, int64_t n) {
  if (o.lambda_mode == static_cast<int>(LambdaMode::kFixed)) return o.lambda;
  const double length = static_cast<double>(n > 1 ? n : 1);
  return 1.0 - 1.0 / (o.alpha * length);
}

__device__ double device_log_discount(double gamma, double lambda) {
  if (gamma <= 0.0 || lambda <= 0.0) return -INFINITY;
  return log(gamma) + log(lambda);
}

// ---- 3. one thread per rollout: N_after, lambda, factor, stitched bootstrap ----
template <typename T>
__global__ void rollout_walk_kernel(KernelOptions o, const int64_t* roll_offsets, int64_t num_rollouts,
                                    const T* rewards, const T* values, const int64_t* n_critic,
                                    const int64_t* first_pos, int64_t* n_after, T* seg_lambda, T* seg_gl,
                                    T* seg_factor, T* seg_ret_scale, T* seg_c0, T* seg_reward) {
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
    if (o.correction && later_tokens > 0) {
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

// Block sum of kSums doubles (blockDim.x == kThreads); thread 0 gets the result.
__device__ void block_sum(double (&x)[kSums], double (*shared)[kThreads]) {
  for (int k = 0; k < kSums; ++k) shared[k][threadIdx.x] = x[k];
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      for (int k = 0; k < kSums; ++k) shared[k][threadIdx.x] += shared[k][threadIdx.x + stride];
    }
    __syncthreads();
  }
  for (int k = 0; k < kSums; ++k) x[k] = shared[k][0];
  __syncthreads();
}

__device__ bool effective_actor(const KernelOptions& o, const uint8_t* actor, const uint8_t* seg_kind,
                                int64_t t, int s) {
  return actor[t] != 0 &&
         !(o.summary_loss_masked && seg_kind[s] == static_cast<uint8_t>(SegmentKind::kSummary));
}

// ---- whitening: sum / squared deviations over effective actor tokens, then the transform ----
template <typename T>
__global__ void whiten_stats_kernel(KernelOptions o, int64_t num_tokens, const T* adv, const uint8_t* actor,
                                    const uint8_t* seg_kind, const int* token_segment, const double* mean,
                                    double* partials) {
  __shared__ double shared[kSums][kThreads];
  double x[kSums] = {0, 0, 0, 0, 0};
  for (int64_t t = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * kThreads) {
    if (!effective_actor(o, actor, seg_kind, t, token_segment[t])) continue;
    const double a = static_cast<double>(adv[t]);
    if (mean) {
      x[0] += (a - *mean) * (a - *mean);
    } else {
      x[0] += a;
    }
    x[1] += 1.0;
  }
  block_sum(x, shared);
  if (threadIdx.x == 0) {
    for (int k = 0; k < kSums; ++k) partials[blockIdx.x * kSums + k] = x[k];
  }
}

template <typename T>
__global__ void whiten_apply_kernel(KernelOptions o, int64_t num_tokens, const uint8_t* actor,
                                    const uint8_t* seg_kind, const int* token_segment, const T* seg_reward,
                                    const double* stats, T* adv) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= num_tokens) return;
  const int s = token_segment[t];
  // stats = {mean, 1 / (std + eps)}
  if (effective_actor(o, actor, seg_kind, t, s))
    adv[t] = static_cast<T>((static_cast<double>(adv[t]) - stats[0]) * stats[1]);
  if (o.positive_only && seg_reward[s] <= T(0)) adv[t] = T(0);
}

// Adds block partials in a fixed order; with `finish` = 1 (mean) or 2 (mean, 1/(std+eps)) for whitening.
__global__ void sum_partials_kernel(const double* partials, int num_blocks, double* out, int finish,
                                    double eps, double* mean_io) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double x[kSums] = {0, 0, 0, 0, 0};
  for (int b = 0; b < num_blocks; ++b) {
    for (int k = 0; k < kSums; ++k) x[k] += partials[b * kSums + k];
  }
  if (finish == 1) {
    mean_io[0] = x[1] > 0 ? x[0] / x[1] : 0.0;
  } else if (finish == 2) {
    mean_io[1] = x[1] > 0 ? 1.0 / (sqrt(x[0] / x[1]) + eps) : 0.0;
  } else {
    for (int k = 0; k < kSums; ++k) out[k] = x[k];
  }
}

// ---- normalizer: one block, fixed order ----
__global__ void normalizer_kernel(KernelOptions o, bool token_level, int64_t num_segments,
                                  const uint8_t* seg_kind, const int64_t* n_actor, const int64_t* n_critic,
                                  double* actor_scale, double* critic_scale) {
  __shared__ int64_t shared[kThreads];
  int64_t at = 0, ct = 0, as = 0, cs = 0;
  auto actor_count = [&](int64_t s) {
    return o.summary_loss_masked && seg_kind[s] == static_cast<uint8_t>(SegmentKind::kSummary) ? int64_t{0}
                                                                                               : n_actor[s];
  };
  for (int64_t s = threadIdx.x; s < num_segments; s += kThreads) {
    const int64_t a = actor_count(s);
    at += a;
    ct += n_critic[s];
    as += a > 0;
    cs += n_critic[s] > 0;
  }
  auto add = [](int64_t a, int64_t b) { return a + b; };
  at = block_reduce(at, shared, add);
  ct = block_reduce(ct, shared, add);
  as = block_reduce(as, shared, add);
  cs = block_reduce(cs, shared, add);
  for (int64_t s = threadIdx.x; s < num_segments; s += kThreads) {
    const int64_t a = actor_count(s), c = n_critic[s];
    if (token_level) {
      actor_scale[s] = a > 0 ? 1.0 / static_cast<double>(at) : 0.0;
      critic_scale[s] = c > 0 ? 1.0 / static_cast<double>(ct) : 0.0;
    } else {
      actor_scale[s] = a > 0 ? 1.0 / (static_cast<double>(a) * static_cast<double>(as)) : 0.0;
      critic_scale[s] = c > 0 ? 1.0 / (static_cast<double>(c) * static_cast<double>(cs)) : 0.0;
    }
  }
}

// ---- fused losses ----
template <typename T>
__global__ void loss_kernel(KernelOptions o, int64_t begin, int64_t end, const T* adv, const T* ret,
                            const T* old_v, const T* new_v, const T* old_lp, const T* new_lp, const T* ref_lp,
                            const uint8_t* actor, const uint8_t* critic, const uint8_t* seg_kind,
                            const int* token_segment, const double* actor_scale, const double* critic_scale,
                            T* grad_lp, T* grad_v, double* partials) {
  __shared__ double shared[kSums][kThreads];
  double x[kSums] = {0, 0, 0, 0, 0};
  const T lo = static_cast<T>(1.0 - o.clip_epsilon), hi = static_cast<T>(1.0 + o.clip_epsilon);
  const T vclip = static_cast<T>(o.value_clip);
  for (int64_t t = begin + blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; t < end;
       t += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int s = token_segment[t];
    const T w = effective_actor(o, actor, seg_kind, t, s) ? static_cast<T>(actor_scale[s]) : T(0);
    const T a = adv[t];
    const T nlp = new_lp ? new_lp[t] : (old_lp ? old_lp[t] : T(0));
    const T olp = old_lp ? old_lp[t] : T(0);
    const T rho = exp(nlp - olp);
    const T unclipped = rho * a;
    const T clipped_obj = min(max(rho, lo), hi) * a;
    const bool take_unclipped = unclipped <= clipped_obj;
    x[0] += static_cast<double>(w * -(take_unclipped ? unclipped : clipped_obj));
    x[3] += take_unclipped ? 0.0 : static_cast<double>(w);
    T g = take_unclipped ? -unclipped : T(0);
    if (o.kl_coef != 0.0) {
      const T d = (ref_lp ? ref_lp[t] : olp) - nlp;
      const T e = exp(d);
      x[1] += static_cast<double>(w * (e - d - T(1)));
      g += static_cast<T>(o.kl_coef) * (T(1) - e);
    }
    const T wv = critic[t] ? static_cast<T>(critic_scale[s]) : T(0);
    const T diff = new_v[t] - ret[t];
    T loss_v = diff * diff;
    T gv = T(2) * diff;
    if (vclip > T(0)) {
      const T delta = new_v[t] - old_v[t];
      const T vc = old_v[t] + min(max(delta, -vclip), vclip);
      const T diff_c = vc - ret[t];
      if (diff_c * diff_c > loss_v) {
        loss_v = diff_c * diff_c;
        gv = fabs(delta) < vclip ? T(2) * diff_c : T(0);
        x[4] += static_cast<double>(wv);
      }
    }
    x[2] += static_cast<double>(wv * loss_v);
    if (grad_lp) {
      grad_lp[t] = w * g;
      grad_v[t] = wv * gv;
    }
  }
  block_sum(x, shared);
  if (threadIdx.x == 0) {
    for (int k = 0; k < kSums; ++k) partials[blockIdx.x * kSums + k] = x[k];
  }
}

KernelOptions kernel_options(const LearnerOptions& o) {
  KernelOptions k{};
  k.gamma = o.gamma;
  k.lambda = o.lambda;
  k.alpha = o.lambda_alpha;
  k.clip_epsilon = o.clip_epsilon;
  k.value_clip = o.value_clip;
  k.kl_coef = o.kl_coef;
  k.lambda_mode = static_cast<int>(o.lambda_mode);
  k.critic_target = static_cast<int>(o.critic_target);
  k.correction = o.correction;
  k.summary_loss_masked = o.summary_loss_masked;
  k.positive_only = o.positive_only;
  return k;
}

}  // namespace

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why)
      *why = std::string("no CUDA device is usable: cudaGetDeviceCount failed: ") + cudaGetErrorString(err);
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device is present (cudaGetDeviceCount = 0)";
    return false;
  }
  return true;
}

template <typename T>
struct DeviceLearner<T>::Impl {
  int64_t num_tokens = 0, num_segments = 0, num_rollouts = 0;
  bool has_old_lp = false, has_new_lp = false, has_ref_lp = false, has_new_v = false;
  DeviceBuffer<T> values, new_values, old_lp, new_lp, ref_lp, rewards, adv, ret, grad_lp, grad_v;
  DeviceBuffer<uint8_t> actor, critic, seg_kind;
  DeviceBuffer<int64_t> seg_offsets, roll_offsets, n_critic, n_actor, first_pos, last_pos, n_after;
  DeviceBuffer<int> token_segment;
  DeviceBuffer<T> seg_lambda, seg_gl, seg_factor, seg_ret_scale, seg_c0, seg_reward;
  DeviceBuffer<GaeMap<T>> chunk_maps;
  DeviceBuffer<GaeState<T>> chunk_in;
  DeviceBuffer<double> actor_scale, critic_scale, partials, sums, whiten_stats;
  bool stats_ready = false;

  void segment_stats() {
    if (stats_ready) return;
    n_critic.resize(num_segments);
    n_actor.resize(num_segments);
    first_pos.resize(num_segments);
    last_pos.resize(num_segments);
    if (num_segments > 0) {
      const int grid = static_cast<int>(std::min<int64_t>(num_segments, 65535));
      segment_stats_kernel<<<grid, kThreads>>>(seg_offsets.data, num_segments, actor.data, critic.data,
                                               n_critic.data, n_actor.data, first_pos.data, last_pos.data);
      CRL_CUDA_CHECK(cudaGetLastError());
    }
    stats_ready = true;
  }
};

template <typename T>
DeviceLearner<T>::DeviceLearner() : impl_(std::make_unique<Impl>()) {
  std::string why;
  if (!device_available(&why)) throw Error("learner", "backend", "cuda was asked for, but " + why);
}

template <typename T>
DeviceLearner<T>::~DeviceLearner() = default;

template <typename T>
void DeviceLearner<T>::upload(const Batch& batch) {
  Impl& m = *impl_;
  m.num_tokens = batch.num_tokens();
  m.num_segments = batch.num_segments();
  m.num_rollouts = batch.num_rollouts();
  upload_converted(m.values, batch.values);
  m.has_new_v = !batch.new_values.empty();
  if (m.has_new_v) upload_converted(m.new_values, batch.new_values);
  m.has_old_lp = !batch.old_logprobs.empty();
  if (m.has_old_lp) upload_converted(m.old_lp, batch.old_logprobs);
  m.has_new_lp = !batch.new_logprobs.empty();
  if (m.has_new_lp) upload_converted(m.new_lp, batch.new_logprobs);
  m.has_ref_lp = !batch.ref_logprobs.empty();
  if (m.has_ref_lp) upload_converted(m.ref_lp, batch.ref_logprobs);
  upload_converted(m.rewards, batch.rewards);
  m.actor.upload(batch.actor_mask.data(), batch.actor_mask.size());
  m.critic.upload(batch.critic_mask.data(), batch.critic_mask.size());
  std::vector<uint8_t> kinds(batch.segment_kind.size());
  for (size_t s = 0; s < kinds.size(); ++s) kinds[s] = static_cast<uint8_t>(batch.segment_kind[s]);
  m.seg_kind.upload(kinds.data(), kinds.size());
  m.seg_offsets.upload(batch.segment_offsets.data(), batch.segment_offsets.size());
  m.roll_offsets.upload(batch.rollout_offsets.data(), batch.rollout_offsets.size());
  m.token_segment.resize(m.num_tokens);
  if (m.num_tokens > 0) {
    token_segment_kernel<<<blocks_for(m.num_tokens, kThreads), kThreads>>>(
        m.seg_offsets.data, m.num_segments, m.num_tokens, m.token_segment.data);
    CRL_CUDA_CHECK(cudaGetLastError());
  }
  m.adv.resize(m.num_tokens);
  m.ret.resize(m.num_tokens);
  m.grad_lp.resize(m.num_tokens);
  m.grad_v.resize(m.num_tokens);
  m.stats_ready = false;
  m.actor_scale.size = 0;  // the normalizer belongs to the previous batch
}

template <typename T>
void DeviceLearner<T>::compute_advantages(const LearnerOptions& options) {
  Impl& m = *impl_;
  const KernelOptions ko = kernel_options(options);
  m.segment_stats();
  const int64_t S = m.num_segments;
  m.n_after.resize(S);
  m.seg_lambda.resize(S);
  m.seg_gl.resize(S);
  m.seg_factor.resize(S);
  m.seg_ret_scale.resize(S);
  m.seg_c0.resize(S);
  m.seg_reward.resize(S);
  if (m.num_rollouts > 0) {
    rollout_walk_kernel<T><<<blocks_for(m.num_rollouts, 128), 128>>>(
        ko, m.roll_offsets.data, m.num_rollouts, m.rewards.data, m.values.data, m.n_critic.data,
        m.first_pos.data, m.n_after.data, m.seg_lambda.data, m.seg_gl.data, m.seg_factor.data,
        m.seg_ret_scale.data, m.seg_c0.data, m.seg_reward.data);
    CRL_CUDA_CHECK(cudaGetLastError());
  }
  if (m.num_tokens == 0) return;
  const int64_t chunks = (m.num_tokens + kChunk - 1) / kChunk;
  m.chunk_maps.resize(chunks);
  m.chunk_in.resize(chunks);
  const T gamma = static_cast<T>(options.gamma);
  gae_reduce_kernel<T><<<static_cast<unsigned>(chunks), kThreads>>>(
      m.num_tokens, gamma, m.values.data, m.critic.data, m.token_segment.data, m.last_pos.data, m.seg_gl.data,
      m.seg_reward.data, m.seg_c0.data, m.chunk_maps.data);
  CRL_CUDA_CHECK(cudaGetLastError());
  chunk_suffix_kernel<T><<<1, kSuffixThreads>>>(m.chunk_maps.data, chunks, m.chunk_in.data);
  CRL_CUDA_CHECK(cudaGetLastError());
  const bool whiten = options.whiten_advantages;
  gae_apply_kernel<T><<<static_cast<unsigned>(chunks), kThreads>>>(
      m.num_tokens, gamma, m.values.data, m.critic.data, m.token_segment.data, m.last_pos.data, m.seg_gl.data,
      m.seg_reward.data, m.seg_c0.data, m.seg_factor.data, m.seg_ret_scale.data, m.chunk_in.data,
      options.positive_only && !whiten, m.adv.data, m.ret.data);
  CRL_CUDA_CHECK(cudaGetLastError());
  if (whiten) {
    // Two-pass mean and standard deviation over effective actor tokens, as on the CPU.
    m.partials.resize(static_cast<size_t>(kLossBlocks) * kSums);
    m.whiten_stats.resize(2);
    whiten_stats_kernel<T><<<kLossBlocks, kThreads>>>(ko, m.num_tokens, m.adv.data, m.actor.data,
                                                      m.seg_kind.data, m.token_segment.data, nullptr,
                                                      m.partials.data);
    sum_partials_kernel<<<1, 1>>>(m.partials.data, kLossBlocks, nullptr, 1, options.whiten_epsilon,
                                  m.whiten_stats.data);
    whiten_stats_kernel<T><<<kLossBlocks, kThreads>>>(ko, m.num_tokens, m.adv.data, m.actor.data,
                                                      m.seg_kind.data, m.token_segment.data,
                                                      m.whiten_stats.data, m.partials.data);
    sum_partials_kernel<<<1, 1>>>(m.partials.data, kLossBlocks, nullptr, 2, options.whiten_epsilon,
                                  m.whiten_stats.data);
    whiten_apply_kernel<T><<<blocks_for(m.num_tokens, kThreads), kThreads>>>(
        ko, m.num_tokens, m.actor.data, m.seg_kind.data, m.token_segment.data, m.seg_reward.data,
        m.whiten_stats.data, m.adv.data);
    CRL_CUDA_CHECK(cudaGetLastError());
  }
}

template <typename T>
void DeviceLearner<T>::upload_advantages(const Advantages& advantages) {
  Impl& m = *impl_;
  upload_converted(m.adv, advantages.advantages);
  upload_converted(m.ret, advantages.returns);
}

template <typename T>
void DeviceLearner<T>::compute_normalizer(const LearnerOptions& options) {
  Impl& m = *impl_;
  m.segment_stats();
  m.actor_scale.resize(m.num_segments);
  m.critic_scale.resize(m.num_segments);
  if (m.num_segments == 0) return;
  normalizer_kernel<<<1, kThreads>>>(kernel_options(options), options.token_level_normalization,
                                     m.num_segments, m.seg_kind.data, m.n_actor.data, m.n_critic.data,
                                     m.actor_scale.data, m.critic_scale.data);
  CRL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
LossResult DeviceLearner<T>::compute_losses(const LearnerOptions& options, TokenRange range) {
  Impl& m = *impl_;
  CRL_CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= m.num_tokens,
            "token range outside the batch");
  CRL_CHECK(m.actor_scale.size == static_cast<size_t>(m.num_segments), "compute_normalizer() must run first");
  m.partials.resize(static_cast<size_t>(kLossBlocks) * kSums);
  m.sums.resize(kSums);
  const T* new_v = m.has_new_v ? m.new_values.data : m.values.data;
  loss_kernel<T><<<kLossBlocks, kThreads>>>(
      kernel_options(options), range.begin, range.end, m.adv.data, m.ret.data, m.values.data, new_v,
      m.has_old_lp ? m.old_lp.data : nullptr, m.has_new_lp ? m.new_lp.data : nullptr,
      m.has_ref_lp ? m.ref_lp.data : nullptr, m.actor.data, m.critic.data, m.seg_kind.data,
      m.token_segment.data, m.actor_scale.data, m.critic_scale.data, m.grad_lp.data, m.grad_v.data,
      m.partials.data);
  CRL_CUDA_CHECK(cudaGetLastError());
  sum_partials_kernel<<<1, 1>>>(m.partials.data, kLossBlocks, m.sums.data, 0, 0.0, nullptr);
  CRL_CUDA_CHECK(cudaGetLastError());
  double host[kSums];
  m.sums.download(host, kSums);
  LossResult r;
  r.policy_loss = host[0];
  r.kl = host[1];
  r.actor_loss = host[0] + options.kl_coef * host[1];
  r.value_loss = host[2];
  r.clip_fraction = host[3];
  r.value_clip_fraction = host[4];
  return r;
}

template <typename T>
void DeviceLearner<T>::synchronize() {
  CRL_CUDA_CHECK(cudaDeviceSynchronize());
}

template <typename T>
void DeviceLearner<T>::download(Advantages& out, Gradients* gradients) const {
  const Impl& m = *impl_;
  CRL_CUDA_CHECK(cudaDeviceSynchronize());
  download_converted(m.adv, out.advantages, m.num_tokens);
  download_converted(m.ret, out.returns, m.num_tokens);
  out.n_sampled.resize(m.num_segments);
  if (m.stats_ready) m.n_critic.download(out.n_sampled.data(), m.num_segments);
  if (m.n_after.size == static_cast<size_t>(m.num_segments)) {
    out.n_after.resize(m.num_segments);
    m.n_after.download(out.n_after.data(), m.num_segments);
    download_converted(m.seg_lambda, out.lambda, m.num_segments);
    download_converted(m.seg_factor, out.factor, m.num_segments);
  }
  if (gradients) {
    download_converted(m.grad_lp, gradients->logprobs, m.num_tokens);
    download_converted(m.grad_v, gradients->values, m.num_tokens);
  }
}

template class DeviceLearner<float>;
template class DeviceLearner<double>;

}  // namespace crl::learners::cuda
