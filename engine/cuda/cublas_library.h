#pragma once
// cuBLAS, loaded when a CUDA back-end first multiplies a matrix, not when a program starts.
//
// Why: linked in, libcublas (and libcublasLt, which it loads) runs its static initializers in every process
// before main: 0.37 s and 218 MB of resident memory on the 2-vCPU VMs of this project (a bare `int main(){}`
// linked with -lcublas, /usr/bin/time), paid by every `crl` command and by every test process, which ctest
// starts per test, GPU or not. cudart is cheap to load (no measurable time) and stays linked: it is what
// says whether a device exists. The CUDA twins (policies/neural/cuda, policies/lm/cuda) use four functions
// of cuBLAS, resolved here on first use with dlopen (the soname of the toolkit the build used, so
// LD_LIBRARY_PATH and the binaries' run path are honoured, then the toolkit's file at build time), or from
// the file the environment variable CRL_CUBLAS names, and then from there only.
//
// The functions keep cuBLAS's own types (cublas_v2.h): only the table is new, so the .cu files call
// cublas().sgemm where they called cublasSgemm. The emulation harnesses (tests/policies/lm/cuda_emulation)
// define cublas() over their host cuBLAS.
#include <cublas_v2.h>

#include <string>

#include "engine/error.h"

namespace crl::cuda {

struct CublasLibrary {
  cublasStatus_t (*create)(cublasHandle_t* handle) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t handle) = nullptr;
  cublasStatus_t (*set_math_mode)(cublasHandle_t handle, cublasMath_t mode) = nullptr;
  cublasStatus_t (*sgemm)(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                          int n, int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                          const float* beta, float* C, int ldc) = nullptr;
};

// The library, loaded on the first call (thread-safe). Throws crl::Error naming the library and the
// loader's message when it cannot be loaded or lacks a function; a later call tries again.
const CublasLibrary& cublas();
// Whether cublas() has loaded it in this process.
bool cublas_loaded();

}  // namespace crl::cuda

// CRL_CUBLAS_CHECK(call): a failed cuBLAS call becomes a crl::Error naming the call and its status.
#define CRL_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                          \
    const cublasStatus_t crl_cublas_status_ = (call);                                           \
    if (crl_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                          \
      throw ::crl::Error("cublas", #call, "status " + std::to_string(int(crl_cublas_status_))); \
    }                                                                                           \
  } while (false)

namespace crl::cuda {

// A cuBLAS handle with full-precision float GEMMs (no TF32), so results match the CPU to float rounding.
struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() {
    CRL_CUBLAS_CHECK(cublas().create(&h));
    CRL_CUBLAS_CHECK(cublas().set_math_mode(h, CUBLAS_PEDANTIC_MATH));
  }
  ~CublasHandle() { cublas().destroy(h); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
};

}  // namespace crl::cuda
