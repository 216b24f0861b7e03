#pragma once
// CRL_CUDA_CHECK(call): a failed CUDA runtime call becomes a crl::Error naming the call and CUDA's message,
// for every .cu file of the engine (learners, neural policy).
#include <cuda_runtime.h>

#include "engine/error.h"

#define CRL_CUDA_CHECK(call)                                                \
  do {                                                                      \
    const cudaError_t crl_cuda_err_ = (call);                               \
    if (crl_cuda_err_ != cudaSuccess) {                                     \
      throw ::crl::Error("cuda", #call, cudaGetErrorString(crl_cuda_err_)); \
    }                                                                       \
  } while (false)
