// The neural policy's shared-trunk network on a CUDA device; see network_cuda.h. Layouts: X is row-major
// rows x inputs, which cuBLAS (column-major) reads as X^T (inputs x rows); W1 is column-major inputs x
// hidden; the heads' weights W = [w_0 .. w_{K-1}] are column-major hidden x heads; H is kept row-major rows x
// hidden, i.e. column-major H^T (hidden x rows); the all-heads scores A and their gradient dS are row-major
// rows x heads (column-major heads x rows). So
//   H^T  = W1^T X^T            gemm(T, N, hidden, rows, inputs)
//   A^T  = W^T H^T             gemm(T, N, heads, rows, hidden)     every head's score of every row (as the
//   CPU) dW   = H^T dS              gemm(N, T, hidden, heads, rows)     dS is zero outside each row's own
//   head dW1  = X^T dH              gemm(N, T, inputs, hidden, rows)    dH^T as the second operand
// Only cuBLAS SGEMM is used (the emulation harness, tests/policies/neural_cuda_emulation.sh, provides just
// that). The per-group softmax, the pooling, the value head and every bias gradient are small kernels whose
// sums run in index order (one thread per output, no atomics), so the result does not depend on scheduling.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cuda/cublas_library.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device.h"
#include "engine/error.h"
#include "policies/neural/cuda/batch_check.h"
#include "policies/neural/cuda/network_cuda.h"

namespace crl::neural {

namespace {

constexpr int kThreads = 256;
int blocks(int64_t n) {
  return static_cast<int>((n + kThreads - 1) / kThreads);
}

template <typename T>
struct Device {
  T* data = nullptr;
  explicit Device(size_t n) {
    if (n > 0) CRL_CUDA_CHECK(cudaMalloc(&data, n * sizeof(T)));
  }
  Device(const T* host, size_t n) : Device(n) {
    if (n > 0) CRL_CUDA_CHECK(cudaMemcpy(data, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit Device(const std::vector<T>& host) : Device(host.data(), host.size()) {}
  ~Device() {
    if (data) cudaFree(data);
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  void to_host(T* host, size_t n) const {
    if (n > 0) CRL_CUDA_CHECK(cudaMemcpy(host, data, n * sizeof(T), cudaMemcpyDeviceToHost));
  }
};

using Handle = cuda::CublasHandle;

// Column-major C (m x n, ldc m) = op(A) op(B), beta 0.
void gemm(const Handle& handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
          const float* a, int lda, const float* b, int ldb, float* c) {
  const float one = 1.0f, zero = 0.0f;
  CRL_CUBLAS_CHECK(cuda::cublas().sgemm(handle.h, ta, tb, m, n, k, &one, a, lda, b, ldb, &zero, c, m));
}

// H = relu(H + b1), H row-major rows x hidden.
__global__ void bias_relu(float* h, const float* b1, int rows, int hidden) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * hidden) return;
  const float z = h[i] + b1[i % hidden];
  h[i] = z > 0.0f ? z : 0.0f;
}

// One thread per group g with head k: s_r = A[r, k] + b_k over its rows, the softmax, the chosen row's
// log-prob and the entropy, by network.cpp's formulas in its order (max, log-sum-exp, probabilities and the
// expected score, entropy = log_total - E[s] clamped at 0).
__global__ void group_softmax(const float* all, const float* head_bias, const int* offsets, const int* chosen,
                              const int* head, int heads, float* scores, float* probs, float* logp,
                              float* entropy, int groups) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  const int begin = offsets[g], end = offsets[g + 1], k = head[g];
  float top = -INFINITY;
  for (int r = begin; r < end; ++r) {
    scores[r] = all[static_cast<int64_t>(r) * heads + k] + head_bias[k];
    top = fmaxf(top, scores[r]);
  }
  float total = 0.0f;
  for (int r = begin; r < end; ++r) total += expf(scores[r] - top);
  const float log_total = logf(total) + top;
  float expected = 0.0f;
  for (int r = begin; r < end; ++r) {
    probs[r] = expf(scores[r] - log_total);
    expected += probs[r] * scores[r];
  }
  logp[g] = scores[begin + chosen[g]] - log_total;
  entropy[g] = fmaxf(0.0f, log_total - expected);
}

// One thread per (group, unit): the mean of H over the group's rows.
__global__ void group_pool(const float* h, float* pooled, const int* offsets, int groups, int hidden) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(groups) * hidden) return;
  const int g = static_cast<int>(i / hidden), u = static_cast<int>(i % hidden);
  const int begin = offsets[g], end = offsets[g + 1];
  float sum = 0.0f;
  for (int r = begin; r < end; ++r) sum += h[static_cast<int64_t>(r) * hidden + u];
  pooled[i] = sum / static_cast<float>(end - begin);
}

// v_g = pooled_g . wv + bv (the one value head, whatever the group's policy head).
__global__ void value_head(const float* pooled, const float* wv, const float* bv, float* values, int groups,
                           int hidden) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  float v = 0.0f;
  for (int u = 0; u < hidden; ++u) v += pooled[static_cast<int64_t>(g) * hidden + u] * wv[u];
  values[g] = v + *bv;
}

// dS[r, k_g] = dlogp_g (1[r = chosen_g] - p_r) for the rows r of group g, one thread per group; the other
// heads' columns stay 0 (dS is zeroed first).
__global__ void score_grad(const float* probs, const float* dlogp, const int* offsets, const int* chosen,
                           const int* head, int heads, float* ds, int groups) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  const int k = head[g];
  for (int r = offsets[g]; r < offsets[g + 1]; ++r) {
    ds[static_cast<int64_t>(r) * heads + k] =
        dlogp[g] * ((r - offsets[g] == chosen[g] ? 1.0f : 0.0f) - probs[r]);
  }
}

// dH = dS W^T, zero where H = 0 (relu): dH[r, u] = sum_k dS[r, k] w_k[u], heads in index order.
__global__ void hidden_grad(const float* h, const float* ds, const float* w, float* dh, int rows, int hidden,
                            int heads) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * hidden) return;
  const int64_t r = i / hidden;
  const int u = static_cast<int>(i % hidden);
  float sum = 0.0f;
  for (int k = 0; k < heads; ++k) sum += ds[r * heads + k] * w[static_cast<int64_t>(k) * hidden + u];
  dh[i] = h[i] > 0.0f ? sum : 0.0f;
}

// out[u] = sum_r in[r * width + u] (column sums of a row-major matrix), in row order.
__global__ void column_sums(const float* in, float* out, int rows, int width) {
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= width) return;
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) sum += in[static_cast<int64_t>(r) * width + u];
  out[u] = sum;
}

// out[u] = sum_g pooled[g, u] dv[g], in group order.
__global__ void weighted_column_sums(const float* pooled, const float* dv, float* out, int groups,
                                     int width) {
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= width) return;
  float sum = 0.0f;
  for (int g = 0; g < groups; ++g) sum += pooled[static_cast<int64_t>(g) * width + u] * dv[g];
  out[u] = sum;
}

// The group heads as the kernels read them: one per group (an empty DecisionBatch::head means head 0).
std::vector<int> group_heads(const DecisionBatch& b) {
  return b.head.empty() ? std::vector<int>(static_cast<size_t>(b.groups()), 0) : b.head;
}

void require_device() {
  std::string why;
  if (!network_cuda_available(&why)) {
    throw Error("policy \"neural\"", "backend", "cuda was asked for, but " + why + "; use backend: cpu");
  }
}

}  // namespace

bool network_cuda_available(std::string* why) {
  return crl::cuda::cuda_device_available(why);
}

ForwardResult cuda_forward(const Network& net, const DecisionBatch& b) {
  check_batch(net, b);
  require_device();
  const NetworkShape& s = net.shape();
  const int rows = static_cast<int>(b.x.rows()), groups = b.groups(), hidden = s.hidden, heads = s.heads;
  ForwardResult f;
  f.hidden.resize(rows, hidden);
  f.scores.resize(rows);
  f.probs.resize(rows);
  f.logp.resize(groups);
  f.entropy.resize(groups);
  f.values.resize(groups);
  f.pooled.resize(groups, hidden);
  if (rows == 0) return f;  // no group either (offsets cover the rows, groups are not empty)
  const Handle handle;
  const std::vector<int> head = group_heads(b);
  Device<float> x(b.x.data(), static_cast<size_t>(b.x.size()));
  Device<float> params(net.parameters());
  Device<int> offsets(b.offsets), chosen(b.chosen), dhead(head);
  Device<float> h(static_cast<size_t>(rows) * hidden), all(static_cast<size_t>(rows) * heads);
  Device<float> scores(rows), probs(rows), logp(groups), entropy(groups), values(groups);
  Device<float> pooled(static_cast<size_t>(groups) * hidden);
  gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, hidden, rows, s.inputs, params.data + s.w1(), s.inputs, x.data,
       s.inputs, h.data);
  bias_relu<<<blocks(static_cast<int64_t>(rows) * hidden), kThreads>>>(h.data, params.data + s.b1(), rows,
                                                                       hidden);
  gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, heads, rows, hidden, params.data + s.w(0), hidden, h.data, hidden,
       all.data);
  group_softmax<<<blocks(groups), kThreads>>>(all.data, params.data + s.b(0), offsets.data, chosen.data,
                                              dhead.data, heads, scores.data, probs.data, logp.data,
                                              entropy.data, groups);
  group_pool<<<blocks(static_cast<int64_t>(groups) * hidden), kThreads>>>(h.data, pooled.data, offsets.data,
                                                                          groups, hidden);
  value_head<<<blocks(groups), kThreads>>>(pooled.data, params.data + s.wv(), params.data + s.bv(),
                                           values.data, groups, hidden);
  CRL_CUDA_CHECK(cudaGetLastError());
  h.to_host(f.hidden.data(), static_cast<size_t>(f.hidden.size()));
  scores.to_host(f.scores.data(), rows);
  probs.to_host(f.probs.data(), rows);
  logp.to_host(f.logp.data(), groups);
  entropy.to_host(f.entropy.data(), groups);
  values.to_host(f.values.data(), groups);
  pooled.to_host(f.pooled.data(), static_cast<size_t>(f.pooled.size()));
  return f;
}

std::vector<float> cuda_backward(const Network& net, const DecisionBatch& b, const ForwardResult& f,
                                 std::span<const float> dlogp, std::span<const float> dvalue) {
  // The forward's activations are uploaded from the host copy, so a CPU forward can be differentiated here
  // too; check_backward checks that they are this batch's.
  check_backward(net, b, f, dlogp, dvalue);
  const NetworkShape& s = net.shape();
  const int rows = static_cast<int>(b.x.rows()), groups = b.groups(), hidden = s.hidden, heads = s.heads;
  require_device();
  std::vector<float> out(static_cast<size_t>(s.size()), 0.0f);
  if (rows == 0) return out;
  const Handle handle;
  const std::vector<int> head = group_heads(b);
  Device<float> x(b.x.data(), static_cast<size_t>(b.x.size()));
  Device<float> params(net.parameters());
  Device<float> h(f.hidden.data(), static_cast<size_t>(f.hidden.size()));
  Device<float> probs(f.probs);
  Device<float> pooled(f.pooled.data(), static_cast<size_t>(f.pooled.size()));
  Device<int> offsets(b.offsets), chosen(b.chosen), dhead(head);
  Device<float> dl(dlogp.data(), dlogp.size()), dv(dvalue.data(), dvalue.size());
  Device<float> ds(static_cast<size_t>(rows) * heads), dh(static_cast<size_t>(rows) * hidden);
  Device<float> grad(static_cast<size_t>(s.size()));
  CRL_CUDA_CHECK(cudaMemset(ds.data, 0, static_cast<size_t>(rows) * heads * sizeof(float)));
  score_grad<<<blocks(groups), kThreads>>>(probs.data, dl.data, offsets.data, chosen.data, dhead.data, heads,
                                           ds.data, groups);
  // The heads: dW = H^T dS, db_k = column sums of dS.
  gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, hidden, heads, rows, h.data, hidden, ds.data, heads,
       grad.data + s.w(0));
  column_sums<<<blocks(heads), kThreads>>>(ds.data, grad.data + s.b(0), rows, heads);
  // The trunk, from every row through its own head.
  hidden_grad<<<blocks(static_cast<int64_t>(rows) * hidden), kThreads>>>(
      h.data, ds.data, params.data + s.w(0), dh.data, rows, hidden, heads);
  gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, s.inputs, hidden, rows, x.data, s.inputs, dh.data, hidden,
       grad.data + s.w1());
  column_sums<<<blocks(hidden), kThreads>>>(dh.data, grad.data + s.b1(), rows, hidden);
  // The value head reads the pooled H without passing gradient into the trunk.
  weighted_column_sums<<<blocks(hidden), kThreads>>>(pooled.data, dv.data, grad.data + s.wv(), groups,
                                                     hidden);
  column_sums<<<1, 1>>>(dv.data, grad.data + s.bv(), groups, 1);
  CRL_CUDA_CHECK(cudaGetLastError());
  grad.to_host(out.data(), out.size());
  return out;
}

}  // namespace crl::neural
