#pragma once
// The loss kernels of the CUDA learner (included only by cuda_learner.cu); CPU twin: cpu/cpu_learner.cpp.
// Whitening of the advantages and the loss normalizer, then loss_kernel: ratio, clipped surrogate, k3 KL,
// value loss and the gradients per token, with the weighted sums reduced per block; sum_partials adds the
// block sums in a fixed order (deterministic).
#include <cmath>

#include "learners/cuda/kernel_common.cuh"

namespace crl::learners::cuda {

// Internal linkage on purpose: included only by cuda_learner.cu, one translation unit, as before the split.
namespace {

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

}  // namespace
}  // namespace crl::learners::cuda
