// Emulation (see cuda_runtime.h): a column-major reference SGEMM in place of cuBLAS.
#pragma once
#include <cstddef>
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0 };
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cublasMath_t { CUBLAS_PEDANTIC_MATH };
typedef int* cublasHandle_t;
inline cublasStatus_t cublasCreate(cublasHandle_t*) {
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) {
  return CUBLAS_STATUS_SUCCESS;
}
// Column-major reference SGEMM: C = alpha op(A) op(B) + beta C (beta 0: C not read).
inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                  int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                                  const float* beta, float* C, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = 0;
      for (int p = 0; p < k; ++p) {
        const float a = ta == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
        const float b = tb == CUBLAS_OP_N ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
        acc += a * b;
      }
      float& c = C[i + (size_t)j * ldc];
      c = *beta == 0.0f ? *alpha * acc : *alpha * acc + *beta * c;
    }
  return CUBLAS_STATUS_SUCCESS;
}
