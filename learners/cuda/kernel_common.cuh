#pragma once
// What the learner's CUDA kernels share (included only by cuda_learner.cu): launch geometry, the device
// buffers, the options the kernels take by value, and block-wide reductions.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "learners/learner.h"

namespace crl::learners::cuda {

// Internal linkage on purpose: included only by cuda_learner.cu, one translation unit, as before the split.
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

// Options the kernels need, by value.
struct KernelOptions {
  double gamma, lambda, alpha, clip_epsilon, value_clip, kl_coef;
  int lambda_mode;          // LambdaMode
  int critic_target;        // CriticTarget
  int correction_segments;  // CorrectionSegments
  bool correction, summary_loss_masked, positive_only;
};

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
  k.correction_segments = static_cast<int>(o.correction_segments);
  k.summary_loss_masked = o.summary_loss_masked;
  k.positive_only = o.positive_only;
  return k;
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

}  // namespace
}  // namespace crl::learners::cuda
