// The neural policy's network on a CUDA device; see network_cuda.h. Layouts: X is row-major rows x inputs,
// which cuBLAS (column-major) reads as X^T (inputs x rows); W1 is column-major inputs x hidden; H is kept
// row-major rows x hidden, i.e. column-major H^T (hidden x rows). So
//   H^T  = W1^T X^T            gemm(T, N, hidden, rows, inputs)
//   s    = H w2                gemv(T) over H^T
//   dW1  = X^T dH              gemm(N, T, inputs, hidden, rows) with dH^T as the second operand
//   dw2  = H^T ds              gemv(N) over H^T
// The per-group softmax, the pooling, the value head and every bias gradient are small kernels whose sums run
// in index order (one thread per output), so the result does not depend on scheduling.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/error.h"
#include "learners/learner.h"
#include "policies/neural/cuda/network_cuda.h"

namespace crl::neural {

namespace {

#define CRL_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                          \
    const cublasStatus_t crl_cublas_status_ = (call);                                           \
    if (crl_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                          \
      throw ::crl::Error("cublas", #call, "status " + std::to_string(int(crl_cublas_status_))); \
    }                                                                                           \
  } while (false)

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

struct Handle {
  cublasHandle_t h = nullptr;
  Handle() {
    CRL_CUBLAS_CHECK(cublasCreate(&h));
    // Full-precision float GEMMs (no TF32), so results match the CPU to float rounding.
    CRL_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  }
  ~Handle() { cublasDestroy(h); }
};

__global__ void bias_relu(float* h, const float* b1, int rows, int hidden) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * hidden) return;
  const float z = h[i] + b1[i % hidden];
  h[i] = z > 0.0f ? z : 0.0f;
}

// One thread per group: softmax of its scores, the chosen row's log-prob.
__global__ void group_softmax(float* scores, float* probs, float* logp, const int* offsets, const int* chosen,
                              float b2, int groups) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  const int begin = offsets[g], end = offsets[g + 1];
  float top = -INFINITY;
  for (int r = begin; r < end; ++r) {
    scores[r] += b2;
    top = fmaxf(top, scores[r]);
  }
  float total = 0.0f;
  for (int r = begin; r < end; ++r) total += expf(scores[r] - top);
  const float log_total = logf(total) + top;
  for (int r = begin; r < end; ++r) probs[r] = expf(scores[r] - log_total);
  logp[g] = scores[begin + chosen[g]] - log_total;
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

__global__ void value_head(const float* pooled, const float* wv, float bv, float* values, int groups,
                           int hidden) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  float v = 0.0f;
  for (int u = 0; u < hidden; ++u) v += pooled[static_cast<int64_t>(g) * hidden + u] * wv[u];
  values[g] = v + bv;
}

// ds_r = dlogp_g (1[r = chosen_g] - p_r), one thread per group.
__global__ void score_grad(const float* probs, const float* dlogp, const int* offsets, const int* chosen,
                           float* ds, int groups) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  for (int r = offsets[g]; r < offsets[g + 1]; ++r) {
    ds[r] = dlogp[g] * ((r - offsets[g] == chosen[g] ? 1.0f : 0.0f) - probs[r]);
  }
}

// dH = ds w2^T, zero where H = 0 (relu).
__global__ void hidden_grad(const float* h, const float* ds, const float* w2, float* dh, int rows,
                            int hidden) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * hidden) return;
  dh[i] = h[i] > 0.0f ? ds[i / hidden] * w2[i % hidden] : 0.0f;
}

// out[u] = sum_r in[r * width + u] (column sums of a row-major matrix), in row order.
__global__ void column_sums(const float* in, float* out, int rows, int width) {
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= width) return;
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) sum += in[static_cast<int64_t>(r) * width + u];
  out[u] = sum;
}

// out[u] = sum_g pooled[g, u] dv[g].
__global__ void weighted_column_sums(const float* pooled, const float* dv, float* out, int groups,
                                     int width) {
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= width) return;
  float sum = 0.0f;
  for (int g = 0; g < groups; ++g) sum += pooled[static_cast<int64_t>(g) * width + u] * dv[g];
  out[u] = sum;
}

// Everything forward() leaves on the device.
struct DeviceForward {
  Device<float> x, params, h, scores, probs, logp, pooled, values;
  Device<int> offsets, chosen;
  DeviceForward(const Network& net, const DecisionBatch& b)
      : x(b.x.data(), static_cast<size_t>(b.x.size())),
        params(net.parameters().data(), net.parameters().size()),
        h(static_cast<size_t>(b.x.rows()) * net.shape().hidden),
        scores(static_cast<size_t>(b.x.rows())),
        probs(static_cast<size_t>(b.x.rows())),
        logp(static_cast<size_t>(b.groups())),
        pooled(static_cast<size_t>(b.groups()) * net.shape().hidden),
        values(static_cast<size_t>(b.groups())),
        offsets(b.offsets.data(), b.offsets.size()),
        chosen(b.chosen.data(), b.chosen.size()) {}
};

void run_forward(const Handle& handle, const Network& net, const DecisionBatch& b, DeviceForward& d) {
  const NetworkShape& s = net.shape();
  const int rows = static_cast<int>(b.x.rows()), groups = b.groups();
  const float one = 1.0f, zero = 0.0f;
  CRL_CUBLAS_CHECK(cublasSgemm(handle.h, CUBLAS_OP_T, CUBLAS_OP_N, s.hidden, rows, s.inputs, &one,
                               d.params.data + s.w1(), s.inputs, d.x.data, s.inputs, &zero, d.h.data,
                               s.hidden));
  bias_relu<<<blocks(static_cast<int64_t>(rows) * s.hidden), kThreads>>>(d.h.data, d.params.data + s.b1(),
                                                                         rows, s.hidden);
  CRL_CUBLAS_CHECK(cublasSgemv(handle.h, CUBLAS_OP_T, s.hidden, rows, &one, d.h.data, s.hidden,
                               d.params.data + s.w(0), 1, &zero, d.scores.data, 1));
  const float b2 = net.parameters()[s.b(0)], bv = net.parameters()[s.bv()];
  group_softmax<<<blocks(groups), kThreads>>>(d.scores.data, d.probs.data, d.logp.data, d.offsets.data,
                                              d.chosen.data, b2, groups);
  group_pool<<<blocks(static_cast<int64_t>(groups) * s.hidden), kThreads>>>(d.h.data, d.pooled.data,
                                                                            d.offsets.data, groups, s.hidden);
  value_head<<<blocks(groups), kThreads>>>(d.pooled.data, d.params.data + s.wv(), bv, d.values.data, groups,
                                           s.hidden);
  CRL_CUDA_CHECK(cudaGetLastError());
}

void check_batch(const Network& net, const DecisionBatch& b) {
  CRL_CHECK(b.x.cols() == net.shape().inputs,
            "rows of " << b.x.cols() << " features, network has " << net.shape().inputs);
  CRL_CHECK(static_cast<int>(b.offsets.size()) == b.groups() + 1 && b.offsets.back() == b.x.rows(),
            "group offsets do not cover the rows");
  // The kernels implement one output head; the policy's shared-trunk network has several (neural_policy.h).
  if (net.shape().heads != 1 || !b.head.empty()) {
    throw Error("policy \"neural\"", "backend",
                "cuda: the CUDA twin implements a single-head network, this one has " +
                    std::to_string(net.shape().heads) + " heads");
  }
  std::string why;
  if (!network_cuda_available(&why)) throw Error("policy \"neural\"", "backend", "cuda: " + why);
}

}  // namespace

bool network_cuda_available(std::string* why) {
  return learners::cuda_device_available(why);
}

ForwardResult cuda_forward(const Network& net, const DecisionBatch& b) {
  check_batch(net, b);
  const Handle handle;
  DeviceForward d(net, b);
  run_forward(handle, net, b, d);
  const int rows = static_cast<int>(b.x.rows()), groups = b.groups(), hidden = net.shape().hidden;
  ForwardResult f;
  f.hidden.resize(rows, hidden);
  f.scores.resize(rows);
  f.probs.resize(rows);
  f.logp.resize(groups);
  f.values.resize(groups);
  f.pooled.resize(groups, hidden);
  d.h.to_host(f.hidden.data(), static_cast<size_t>(f.hidden.size()));
  d.scores.to_host(f.scores.data(), rows);
  d.probs.to_host(f.probs.data(), rows);
  d.logp.to_host(f.logp.data(), groups);
  d.values.to_host(f.values.data(), groups);
  d.pooled.to_host(f.pooled.data(), static_cast<size_t>(f.pooled.size()));
  f.entropy.assign(groups, 0.0f);  // -sum p log p per group, from the probabilities (host)
  for (int g = 0; g < groups; ++g) {
    for (int r = b.offsets[g]; r < b.offsets[g + 1]; ++r) {
      if (f.probs[r] > 0.0f) f.entropy[g] -= f.probs[r] * std::log(f.probs[r]);
    }
  }
  return f;
}

std::vector<float> cuda_backward(const Network& net, const DecisionBatch& b, const ForwardResult& f,
                                 std::span<const float> dlogp, std::span<const float> dvalue) {
  check_batch(net, b);
  const NetworkShape& s = net.shape();
  const int rows = static_cast<int>(b.x.rows()), groups = b.groups();
  CRL_CHECK(static_cast<int>(dlogp.size()) == groups && static_cast<int>(dvalue.size()) == groups,
            "gradient sizes");
  const Handle handle;
  // The forward's activations come from the host copy, so a CPU forward can be differentiated here too.
  Device<float> x(b.x.data(), static_cast<size_t>(b.x.size()));
  Device<float> params(net.parameters().data(), net.parameters().size());
  Device<float> h(f.hidden.data(), static_cast<size_t>(f.hidden.size()));
  Device<float> probs(f.probs.data(), f.probs.size());
  Device<float> pooled(f.pooled.data(), static_cast<size_t>(f.pooled.size()));
  Device<int> offsets(b.offsets.data(), b.offsets.size()), chosen(b.chosen.data(), b.chosen.size());
  Device<float> dl(dlogp.data(), dlogp.size()), dv(dvalue.data(), dvalue.size());
  Device<float> ds(static_cast<size_t>(rows)), dh(static_cast<size_t>(rows) * s.hidden);
  Device<float> grad(static_cast<size_t>(s.size()));
  CRL_CUDA_CHECK(cudaMemset(grad.data, 0, static_cast<size_t>(s.size()) * sizeof(float)));
  const float one = 1.0f, zero = 0.0f;
  score_grad<<<blocks(groups), kThreads>>>(probs.data, dl.data, offsets.data, chosen.data, ds.data, groups);
  CRL_CUBLAS_CHECK(cublasSgemv(handle.h, CUBLAS_OP_N, s.hidden, rows, &one, h.data, s.hidden, ds.data, 1,
                               &zero, grad.data + s.w(0), 1));
  column_sums<<<1, 1>>>(ds.data, grad.data + s.b(0), rows, 1);
  hidden_grad<<<blocks(static_cast<int64_t>(rows) * s.hidden), kThreads>>>(
      h.data, ds.data, params.data + s.w(0), dh.data, rows, s.hidden);
  CRL_CUBLAS_CHECK(cublasSgemm(handle.h, CUBLAS_OP_N, CUBLAS_OP_T, s.inputs, s.hidden, rows, &one, x.data,
                               s.inputs, dh.data, s.hidden, &zero, grad.data + s.w1(), s.inputs));
  column_sums<<<blocks(s.hidden), kThreads>>>(dh.data, grad.data + s.b1(), rows, s.hidden);
  weighted_column_sums<<<blocks(s.hidden), kThreads>>>(pooled.data, dv.data, grad.data + s.wv(), groups,
                                                       s.hidden);
  column_sums<<<1, 1>>>(dv.data, grad.data + s.bv(), groups, 1);
  CRL_CUDA_CHECK(cudaGetLastError());
  std::vector<float> out(static_cast<size_t>(s.size()));
  grad.to_host(out.data(), out.size());
  return out;
}

}  // namespace crl::neural
