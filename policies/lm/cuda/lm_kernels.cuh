#pragma once
// The CUDA twin's own kernels (lm_cuda.cu): one thread block per row (token) or per (token, head), a fixed
// block size and tree reductions in shared memory, so every sum runs in the same order on every call. All
// matrices are row-major, as on the CPU (config.h). Each kernel names the CPU lines it mirrors.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace crl::lm::kernels {

constexpr int kBlock = 128;  // threads per block of every row kernel (a power of two, for the reductions)

// Sum (or max) of one value per thread over the block; every thread gets the result. `scratch` holds
// kBlock floats. Ends with a barrier, so scratch can be reused right after.
__device__ inline float block_sum(float v, float* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
    __syncthreads();
  }
  const float r = scratch[0];
  __syncthreads();
  return r;
}
__device__ inline float block_max(float v, float* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = scratch[0];
  __syncthreads();
  return r;
}

// x[t] = tok_emb[tokens[t]] + pos_emb[pos[t]]  (model.cpp forward, first loop); pos_emb null (rotary
// positions): x[t] = tok_emb[tokens[t]]. One thread per entry.
__global__ void embed(const float* tok, const float* pos_emb, const int* tokens, const int* pos, float* x,
                      int T, int d) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(T) * d) return;
  const int t = static_cast<int>(i / d), c = static_cast<int>(i % d);
  const float token = tok[static_cast<int64_t>(tokens[t]) * d + c];
  x[i] = pos_emb ? token + pos_emb[static_cast<int64_t>(pos[t]) * d + c] : token;
}

// Rotary positions (ops.h RopeTable::rotate): each pair (v[i], v[i + half]) of every query and key head of
// row r (the first 2d entries of a 3d-wide qkv row) turned by the angle of position pos[r], with the CPU's
// own cosine and sine tables ([position x half]); inverse = 1 turns back (the transpose, for the backward on
// dqkv). The products are __fmul_rn, which the compiler never fuses into an FMA, so a rotation has the
// CPU's bits. One thread per pair.
__global__ void rope_rotate(float* qkv, const int* pos, const float* cosines, const float* sines, int rows,
                            int d, int heads, int inverse) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * d) return;  // d pairs per row: 2 heads vectors of `half` pairs
  const int half = d / heads / 2;
  const int r = static_cast<int>(i / d), pair = static_cast<int>(i % d);
  const int vec = pair / half, k = pair % half;  // vec < heads: a query head; else a key head
  float* v = qkv + static_cast<int64_t>(r) * 3 * d + static_cast<int64_t>(vec) * 2 * half;
  const int64_t at = static_cast<int64_t>(pos[r]) * half + k;
  const float c = cosines[at], s = inverse ? -sines[at] : sines[at];
  const float a = v[k], b = v[k + half];
  v[k] = __fmul_rn(a, c) - __fmul_rn(b, s);
  v[k + half] = __fmul_rn(a, s) + __fmul_rn(b, c);
}

// y = x g / sqrt(mean(x^2) + eps), inv[t] = that 1/sqrt (ops.h rmsnorm_row). One block per row.
__global__ void rmsnorm_forward(const float* x, const float* gain, float eps, float* y, float* inv, int d) {
  __shared__ float scratch[kBlock];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * d;
  float sq = 0.0f;
  for (int c = threadIdx.x; c < d; c += kBlock) sq += x[row + c] * x[row + c];
  const float r = 1.0f / sqrtf(block_sum(sq, scratch) / static_cast<float>(d) + eps);
  for (int c = threadIdx.x; c < d; c += kBlock) y[row + c] = x[row + c] * gain[c] * r;
  if (threadIdx.x == 0) inv[blockIdx.x] = r;
}

// dx (= or +=) r z - x r^3 (x.z) / d with z = dy g (model.cpp rmsnorm_backward, the dx part). One block per
// row. The gain's gradient is rmsnorm_gain_grad (a column sum, in row order).
__global__ void rmsnorm_backward(const float* x, const float* inv, const float* gain, const float* dy,
                                 float* dx, int d, int accumulate) {
  __shared__ float scratch[kBlock];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * d;
  const float r = inv[blockIdx.x];
  float xz = 0.0f;
  for (int c = threadIdx.x; c < d; c += kBlock) xz += x[row + c] * (dy[row + c] * gain[c]);
  xz = block_sum(xz, scratch);
  const float k = r * r * r * xz / static_cast<float>(d);
  for (int c = threadIdx.x; c < d; c += kBlock) {
    const float v = dy[row + c] * gain[c] * r - x[row + c] * k;
    dx[row + c] = accumulate ? dx[row + c] + v : v;
  }
}

// dgain[c] += sum_t dy[t, c] x[t, c] inv[t], t in order. One thread per column.
__global__ void rmsnorm_gain_grad(const float* x, const float* inv, const float* dy, float* dgain, int T,
                                  int d) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= d) return;
  float sum = 0.0f;
  for (int t = 0; t < T; ++t)
    sum += dy[static_cast<int64_t>(t) * d + c] * x[static_cast<int64_t>(t) * d + c] * inv[t];
  dgain[c] += sum;
}

__device__ inline float gelu(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}
__device__ inline float gelu_grad(float x) {
  return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * expf(-0.5f * x * x);
}

__global__ void gelu_forward(const float* u, float* g, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) g[i] = gelu(u[i]);
}
__global__ void gelu_backward(const float* u, float* du, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) du[i] *= gelu_grad(u[i]);
}

// p[0 .. n) = softmax(p[0 .. n)) over the block, `top` each thread's partial maximum of its entries (the
// CPU's max-subtracted exp, then the division by the sum). Ends with a barrier: every p[j] is visible to
// the whole block.
__device__ inline void softmax_in_place(float* p, int n, float top, float* scratch) {
  top = block_max(top, scratch);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += kBlock) {
    p[j] = expf(p[j] - top);
    sum += p[j];
  }
  sum = block_sum(sum, scratch);  // its barrier also publishes every p[j] to the whole block
  for (int j = threadIdx.x; j < n; j += kBlock) p[j] /= sum;
  __syncthreads();
}

// Where token t's attention lives. Sequence s = seq[t] starts at token begin[s] and has n = begin[s+1] -
// begin[s] tokens; its probabilities for head h are the n x n row-major matrix at probs + base[s] + h n n,
// row i = t - begin[s] (the CPU's c.probs[s * heads + h]).
struct AttnIndex {
  const int* seq;
  const int* begin;     // the batch's offsets (sequences + 1)
  const int64_t* base;  // per sequence: sum over earlier sequences of heads * n^2
};

// Causal attention for token t (blockIdx.x) and head h (blockIdx.y): p = softmax(scale q.k_j, j <= i), zero
// for j > i, attn[t, h] = sum_j p_j v_j (model.cpp forward, the per-head loop). qkv is T x 3d.
__global__ void attention_forward(const float* qkv, AttnIndex ix, float* probs, float* attn, int d, int heads,
                                  float scale) {
  __shared__ float scratch[kBlock];
  const int t = blockIdx.x, h = blockIdx.y, hd = d / heads;
  const int s = ix.seq[t], begin = ix.begin[s], n = ix.begin[s + 1] - begin, i = t - begin;
  float* p = probs + ix.base[s] + (static_cast<int64_t>(h) * n + i) * n;
  const float* q = qkv + static_cast<int64_t>(t) * 3 * d + h * hd;
  float top = -INFINITY;
  for (int j = threadIdx.x; j < n; j += kBlock) {
    if (j > i) {
      p[j] = 0.0f;
      continue;
    }
    const float* k = qkv + static_cast<int64_t>(begin + j) * 3 * d + d + h * hd;
    float dot = 0.0f;
    for (int c = 0; c < hd; ++c) dot += q[c] * k[c];
    p[j] = dot * scale;
    top = fmaxf(top, p[j]);
  }
  softmax_in_place(p, i + 1, top, scratch);
  for (int c = threadIdx.x; c < hd; c += kBlock) {
    float out = 0.0f;
    for (int j = 0; j <= i; ++j)
      out += p[j] * qkv[static_cast<int64_t>(begin + j) * 3 * d + 2 * d + h * hd + c];
    attn[static_cast<int64_t>(t) * d + h * hd + c] = out;
  }
}

// Attention backward, query side, for token t and head h (model.cpp backward): dp_j = dout . v_j,
// ds_j = scale p_j (dp_j - sum_k p_k dp_k), written to ds (same layout as probs), and dq = sum_j ds_j k_j.
__global__ void attention_backward_query(const float* qkv, AttnIndex ix, const float* probs,
                                         const float* dattn, float* ds, float* dqkv, int d, int heads,
                                         float scale) {
  __shared__ float scratch[kBlock];
  const int t = blockIdx.x, h = blockIdx.y, hd = d / heads;
  const int s = ix.seq[t], begin = ix.begin[s], n = ix.begin[s + 1] - begin, i = t - begin;
  const int64_t at = ix.base[s] + (static_cast<int64_t>(h) * n + i) * n;
  const float* p = probs + at;
  float* g = ds + at;
  const float* dout = dattn + static_cast<int64_t>(t) * d + h * hd;
  float rowsum = 0.0f;
  for (int j = threadIdx.x; j < n; j += kBlock) {
    if (j > i) {
      g[j] = 0.0f;
      continue;
    }
    const float* v = qkv + static_cast<int64_t>(begin + j) * 3 * d + 2 * d + h * hd;
    float dp = 0.0f;
    for (int c = 0; c < hd; ++c) dp += dout[c] * v[c];
    g[j] = dp;
    rowsum += p[j] * dp;
  }
  rowsum = block_sum(rowsum, scratch);
  for (int j = threadIdx.x; j <= i; j += kBlock) g[j] = scale * (p[j] * g[j] - p[j] * rowsum);
  __syncthreads();
  for (int c = threadIdx.x; c < hd; c += kBlock) {
    float dq = 0.0f;
    for (int j = 0; j <= i; ++j) dq += g[j] * qkv[static_cast<int64_t>(begin + j) * 3 * d + d + h * hd + c];
    dqkv[static_cast<int64_t>(t) * 3 * d + h * hd + c] = dq;
  }
}

// Attention backward, key side, for token t (key j = t - begin) and head h: dk_j = sum_{i >= j} ds_ij q_i,
// dv_j = sum_{i >= j} p_ij dout_i. Runs after attention_backward_query has written every ds row.
__global__ void attention_backward_key(const float* qkv, AttnIndex ix, const float* probs, const float* ds,
                                       const float* dattn, float* dqkv, int d, int heads) {
  const int t = blockIdx.x, h = blockIdx.y, hd = d / heads;
  const int s = ix.seq[t], begin = ix.begin[s], n = ix.begin[s + 1] - begin, j = t - begin;
  const int64_t mat = ix.base[s] + static_cast<int64_t>(h) * n * n;
  for (int c = threadIdx.x; c < hd; c += kBlock) {
    float dk = 0.0f, dv = 0.0f;
    for (int i = j; i < n; ++i) {
      const int64_t row = static_cast<int64_t>(begin + i) * 3 * d;
      dk += ds[mat + static_cast<int64_t>(i) * n + j] * qkv[row + h * hd + c];
      dv += probs[mat + static_cast<int64_t>(i) * n + j] *
            dattn[static_cast<int64_t>(begin + i) * d + h * hd + c];
    }
    dqkv[static_cast<int64_t>(t) * 3 * d + d + h * hd + c] = dk;
    dqkv[static_cast<int64_t>(t) * 3 * d + 2 * d + h * hd + c] = dv;
  }
}

// Per token (one block): lse = max + log sum exp(logits - max) (ops.h log_sum_exp), logp = logits[target] -
// lse (0 without a target), value = hidden . value_w + value_b.
__global__ void output_head(const float* logits, const int* targets, const float* hidden, const float* vw,
                            const float* vb, float* lse, float* logp, float* values, int vocab, int d) {
  __shared__ float scratch[kBlock];
  const int t = blockIdx.x;
  const float* row = logits + static_cast<int64_t>(t) * vocab;
  float top = -INFINITY;
  for (int j = threadIdx.x; j < vocab; j += kBlock) top = fmaxf(top, row[j]);
  top = block_max(top, scratch);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += kBlock) sum += expf(row[j] - top);
  sum = block_sum(sum, scratch);
  float v = 0.0f;
  for (int c = threadIdx.x; c < d; c += kBlock) v += hidden[static_cast<int64_t>(t) * d + c] * vw[c];
  v = block_sum(v, scratch);
  if (threadIdx.x == 0) {
    const float l = top + logf(sum);
    lse[t] = l;
    logp[t] = targets[t] >= 0 ? row[targets[t]] - l : 0.0f;
    values[t] = v + vb[0];
  }
}

// dlogits[t] = dlogp[t] (onehot(target) - softmax(logits[t])), zero without a target or with dlogp 0.
__global__ void logits_grad(const float* logits, const float* lse, const int* targets, const float* dlogp,
                            float* dlogits, int vocab) {
  const int t = blockIdx.x;
  const int64_t row = static_cast<int64_t>(t) * vocab;
  const bool active = targets[t] >= 0 && dlogp[t] != 0.0f;
  for (int j = threadIdx.x; j < vocab; j += kBlock) {
    float g = 0.0f;
    if (active) {
      g = expf(logits[row + j] - lse[t]) * -dlogp[t];
      if (j == targets[t]) g += dlogp[t];
    }
    dlogits[row + j] = g;
  }
}

// Value head: dvw[c] += sum_t hidden[t, c] dvalue[t]; thread c == d also does dvb += sum_t dvalue[t].
__global__ void value_grad(const float* hidden, const float* dvalue, float* dvw, float* dvb, int T, int d) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c > d) return;
  float sum = 0.0f;
  for (int t = 0; t < T; ++t) sum += c == d ? dvalue[t] : hidden[static_cast<int64_t>(t) * d + c] * dvalue[t];
  if (c == d) {
    dvb[0] += sum;
  } else {
    dvw[c] += sum;
  }
}

// dh[t, c] += value_w[c] dvalue[t] (value_grad_to_trunk).
__global__ void value_into_trunk(const float* vw, const float* dvalue, float* dh, int T, int d) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(T) * d) return;
  dh[i] += vw[i % d] * dvalue[i / d];
}

// dtok[tokens[t]] += dx[t], dpos[pos[t]] += dx[t] (dpos null with rotary positions: their gradient stays 0),
// t in order (no atomics, so the bits do not depend on scheduling). One thread per column.
__global__ void embed_grad(const float* dx, const int* tokens, const int* pos, float* dtok, float* dpos,
                           int T, int d) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= d) return;
  for (int t = 0; t < T; ++t) {
    const float g = dx[static_cast<int64_t>(t) * d + c];
    dtok[static_cast<int64_t>(tokens[t]) * d + c] += g;
    if (dpos) dpos[static_cast<int64_t>(pos[t]) * d + c] += g;
  }
}

// Sampling with the KV cache (cuda_sample): the layer's cache holds, per slot, max_positions rows of d keys
// and d values (slot-major). Row r of a decode round feeds slot slot[r] at position pos[r].

// keys[slot[r], pos[r]] = qkv[r, d .. 2d), values[...] = qkv[r, 2d .. 3d) (sampler.cpp KvCache::push, the
// cache writes). One thread per entry of the rows x d block.
__global__ void kv_store(const float* qkv, const int* slot, const int* pos, float* keys, float* values,
                         int rows, int d, int max_positions) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * d) return;
  const int r = static_cast<int>(i / d), c = static_cast<int>(i % d);
  const int64_t at = (static_cast<int64_t>(slot[r]) * max_positions + pos[r]) * d + c;
  keys[at] = qkv[static_cast<int64_t>(r) * 3 * d + d + c];
  values[at] = qkv[static_cast<int64_t>(r) * 3 * d + 2 * d + c];
}

// Row r's (blockIdx.x) attention for head h (blockIdx.y) over its slot's cached positions 0 .. pos[r]
// (KvCache::push, the per-head loop): p = softmax(scale q.k_j) with the maximum subtracted, attn[r, h] =
// sum_j p_j v_j. `scores` is scratch of rows x heads x max_positions.
__global__ void decode_attention(const float* qkv, const float* keys, const float* values, const int* slot,
                                 const int* pos, float* scores, float* attn, int d, int heads,
                                 int max_positions, float scale) {
  __shared__ float scratch[kBlock];
  const int r = blockIdx.x, h = blockIdx.y, hd = d / heads, n = pos[r] + 1;
  const int64_t cache = static_cast<int64_t>(slot[r]) * max_positions * d;
  float* p = scores + (static_cast<int64_t>(r) * heads + h) * max_positions;
  const float* q = qkv + static_cast<int64_t>(r) * 3 * d + h * hd;
  float top = -INFINITY;
  for (int j = threadIdx.x; j < n; j += kBlock) {
    const float* k = keys + cache + static_cast<int64_t>(j) * d + h * hd;
    float dot = 0.0f;
    for (int c = 0; c < hd; ++c) dot += q[c] * k[c];
    p[j] = dot * scale;
    top = fmaxf(top, p[j]);
  }
  softmax_in_place(p, n, top, scratch);
  for (int c = threadIdx.x; c < hd; c += kBlock) {
    float out = 0.0f;
    for (int j = 0; j < n; ++j) out += p[j] * values[cache + static_cast<int64_t>(j) * d + h * hd + c];
    attn[static_cast<int64_t>(r) * d + h * hd + c] = out;
  }
}

}  // namespace crl::lm::kernels
