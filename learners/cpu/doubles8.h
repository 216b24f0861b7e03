#pragma once
// Native vectors of doubles for kernels that must give the same bits in every instruction-set copy
// (isa_kernels.h): the widest vector the translation unit is compiled for (8 doubles with AVX-512, 4 with
// AVX, 2 otherwise), element-wise IEEE arithmetic only, and sums kept in eight lanes (kSumLanes) so that
// they add in the same order whatever the width: lane j of a sum adds tokens j, j + 8, j + 16, ... A copy
// with narrower vectors holds the eight lanes in several vectors (kSumParts).
//
// Why not one 64-byte GCC vector everywhere: where the hardware vectors are narrower, GCC expands many
// operations on it element by element, which made the AVX2 copy as slow as the scalar one.
#include <bit>
#include <cstdint>
#include <cstring>

namespace crl::learners::cpu {
namespace {

#if defined(__AVX512F__)
constexpr int kNativeWidth = 8;
#elif defined(__AVX__)
constexpr int kNativeWidth = 4;
#else
constexpr int kNativeWidth = 2;
#endif
constexpr int kSumLanes = 8;
constexpr int kSumParts = kSumLanes / kNativeWidth;

typedef double Vec __attribute__((vector_size(kNativeWidth * sizeof(double))));
typedef int64_t VecMask __attribute__((vector_size(kNativeWidth * sizeof(int64_t))));
typedef uint64_t VecBits __attribute__((vector_size(kNativeWidth * sizeof(uint64_t))));

inline Vec splat(double x) {
  return Vec{} + x;
}

inline Vec load_vec(const double* x) {
  Vec v;
  std::memcpy(&v, x, sizeof(v));
  return v;
}

inline void store_vec(double* x, Vec v) {
  std::memcpy(x, &v, sizeof(v));
}

// kNativeWidth 0/1 mask bytes as doubles (through 32-bit integers: compilers widen bytes to int32 and int32
// to double in vector instructions, not bytes to double directly).
inline Vec load_mask(const uint8_t* x) {
  typedef int32_t Ints __attribute__((vector_size(kNativeWidth * sizeof(int32_t))));
  Ints ints;
  for (int i = 0; i < kNativeWidth; ++i) ints[i] = x[i];
  return __builtin_convertvector(ints, Vec);
}

// Eight sum lanes.
struct Sum8 {
  Vec part[kSumParts];
  void clear() {
    for (Vec& p : part) p = Vec{};
  }
  // Adds the native vector of tokens whose position in the 8-token group starts at `part_index * width`.
  void add(int part_index, Vec v) { part[part_index] += v; }
  // The lanes, in a fixed order.
  double total() const {
    double lane[kSumLanes];
    std::memcpy(lane, part, sizeof(lane));
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  }
};

}  // namespace
}  // namespace crl::learners::cpu
