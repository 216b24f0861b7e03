#include <cuda_runtime.h>

#include "engine/cuda/device.h"
#include "engine/error.h"

namespace crl::cuda {

namespace {
__global__ void philox_blocks_kernel(Rng rng, uint64_t count, PhiloxCounter* out) {
  const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = rng.block(i);
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error("cuda", what, cudaGetErrorString(status));
}
}  // namespace

bool cuda_device_available(std::string* why) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    if (why != nullptr) {
      *why = status != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(status)
                                   : std::string("no CUDA device present");
    }
    return false;
  }
  return true;
}

std::vector<PhiloxCounter> philox_blocks(const StreamKey& key, uint64_t count) {
  std::vector<PhiloxCounter> host(count);
  if (count == 0) return host;
  PhiloxCounter* device = nullptr;
  check(cudaMalloc(&device, count * sizeof(PhiloxCounter)), "cudaMalloc");
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((count + threads - 1) / threads);
  philox_blocks_kernel<<<blocks, threads>>>(Rng(key), count, device);
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess)
    status = cudaMemcpy(host.data(), device, count * sizeof(PhiloxCounter), cudaMemcpyDeviceToHost);
  cudaFree(device);
  check(status, "philox_blocks");
  return host;
}

}  // namespace crl::cuda
