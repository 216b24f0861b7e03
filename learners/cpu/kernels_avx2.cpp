// The CPU kernels (isa_kernels.h) compiled with -mavx2 (4 doubles per vector); cpu_learner.cpp calls them
// when the CPU has AVX2 but not AVX-512.
#include "learners/cpu/sweep_kernel.h"

CRL_DEFINE_CPU_KERNELS(avx2)
