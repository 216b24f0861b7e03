// The CPU kernels (isa_kernels.h) compiled with -mavx512f (8 doubles per vector); cpu_learner.cpp calls them
// when the CPU has AVX-512F, DQ, VL and BW.
#include "learners/cpu/sweep_kernel.h"

CRL_DEFINE_CPU_KERNELS(avx512)
