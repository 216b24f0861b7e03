#pragma once
// Host emulation of the CUDA runtime subset policies/lm/cuda uses, for checking the kernels' index math and
// the GEMM transposes on a machine without a GPU (run.sh). Each CUDA thread of a block is a ucontext fiber;
// __syncthreads yields, and the fibers run round-robin, so every thread finishes a phase before any starts
// the next (a barrier). Blocks run one after another; __shared__ is a function-local static. Memory from
// cudaMalloc is filled with NaN bytes so that reading a never-written entry shows. Not a performance model.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
#include <ucontext.h>

#include <functional>
inline ucontext_t emu_main;
inline ucontext_t* emu_cur = nullptr;
inline void __syncthreads() {
  swapcontext(emu_cur, &emu_main);
}
// A product the compiler never fuses into an FMA (host code here has no FMA either way).
inline float __fmul_rn(float a, float b) {
  return a * b;
}
#define __global__
#define __device__
#define __shared__ static
enum cudaError_t { cudaSuccess = 0 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
inline const char* cudaGetErrorString(cudaError_t) {
  return "emu";
}
inline cudaError_t cudaGetLastError() {
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMalloc(T** p, size_t n) {
  *p = static_cast<T*>(std::malloc(n));
  // Poison: NaN bytes, so reading never-written memory shows.
  std::memset(*p, 0xff, n);
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* d, int v, size_t n) {
  std::memset(d, v, n);
  return cudaSuccess;
}
inline std::function<void()> emu_body;
inline bool emu_done[1024];
inline int emu_tid;
inline void emu_entry() {
  emu_body();
  emu_done[emu_tid] = true;
}
template <class F, class... A>
void emu_launch(F f, dim3 grid, dim3 block, A... args) {
  blockDim = block;
  gridDim = grid;
  const unsigned n = block.x;
  static std::vector<std::vector<char>> stacks(1024, std::vector<char>(1 << 16));
  std::vector<ucontext_t> ctx(n);
  emu_body = [&] { f(args...); };
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      blockIdx = dim3(bx, by);
      for (unsigned t = 0; t < n; ++t) {
        getcontext(&ctx[t]);
        ctx[t].uc_stack.ss_sp = stacks[t].data();
        ctx[t].uc_stack.ss_size = stacks[t].size();
        ctx[t].uc_link = &emu_main;
        makecontext(&ctx[t], emu_entry, 0);
        emu_done[t] = false;
      }
      bool any = true;
      while (any) {
        any = false;
        for (unsigned t = 0; t < n; ++t) {
          if (emu_done[t]) continue;
          threadIdx = dim3(t);
          emu_tid = t;
          emu_cur = &ctx[t];
          swapcontext(&emu_main, &ctx[t]);
          if (!emu_done[t]) any = true;
        }
      }
    }
}
