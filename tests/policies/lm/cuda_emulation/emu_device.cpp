// Emulation (see cuda_runtime.h): the emulated device is always there, and so is its host cuBLAS
// (cublas_v2.h of this folder) in place of the library engine/cuda/cublas_library.cpp loads.
#include <string>

#include "engine/cuda/cublas_library.h"
#include "engine/cuda/device.h"
namespace crl::cuda {
bool cuda_device_available(std::string*) {
  return true;
}
const CublasLibrary& cublas() {
  static const CublasLibrary library{cublasCreate, cublasDestroy, cublasSetMathMode, cublasSgemm};
  return library;
}
bool cublas_loaded() {
  return true;
}
}  // namespace crl::cuda
