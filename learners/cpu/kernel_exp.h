#pragma once
// The exponential of the loss kernel (importance ratios, the k3 KL): our own, element-wise on native vectors
// (doubles8.h), so that every instruction-set copy of the kernel gives the same bits (a library exp may
// differ between its scalar and vector versions, and between libraries).
#include <bit>
#include <cstdint>

#include "learners/cpu/doubles8.h"

namespace crl::learners::cpu {
namespace {

// 2^(j/8) for j = 0..7, each correctly rounded.
alignas(64) constexpr double kExp2Eighths[8] = {
    0x1.0000000000000p+0, 0x1.172b83c7d517bp+0, 0x1.306fe0a31b715p+0, 0x1.4bfdad5362a27p+0,
    0x1.6a09e667f3bcdp+0, 0x1.8ace5422aa0dbp+0, 0x1.ae89f995ad3adp+0, 0x1.d5818dcfba487p+0};

// kExp2Eighths[j] lane by lane (j in 0..7): one permute with AVX-512, two and a blend with AVX2 (GCC).
inline Vec exp2_eighths(VecMask j) {
#if defined(__GNUC__) && !defined(__clang__)
  if constexpr (kNativeWidth == 8) {
    return __builtin_shuffle(load_vec(kExp2Eighths), j);
  } else if constexpr (kNativeWidth == 4) {
    return __builtin_shuffle(load_vec(kExp2Eighths), load_vec(kExp2Eighths + 4), j);
  }
#endif
  Vec r;
  for (int i = 0; i < kNativeWidth; ++i) r[i] = kExp2Eighths[j[i]];
  return r;
}

// exp(x) within 2 ulp for x in [-708, 709] (inputs outside are clamped; tests/learners/isa_kernels_test.cpp
// measures it), element-wise:
//   n = round(8 x / ln 2) by the 1.5 * 2^52 trick, r = x - n ln 2 / 8 (ln 2 / 8 split in two so that the
//   products are exact), so |r| <= ln 2 / 16;
//   exp(x) = 2^floor(n/8) * 2^((n mod 8)/8) * exp(r), exp(r) by a degree-8 Taylor polynomial (truncation
//   error < 2e-18), 2^((n mod 8)/8) from a table of eight, 2^floor(n/8) built in the exponent bits.
inline Vec kernel_exp(Vec x) {
  x = x < -708.0 ? splat(-708.0) : (x > 709.0 ? splat(709.0) : x);
  constexpr double kEightOverLn2 = 0x1.71547652b82fep+3;
  constexpr double kLn2Over8Hi = 0x1.62e42fee00000p-4;  // 32 significant bits: n * it is exact for |n| < 2^21
  constexpr double kLn2Over8Lo = 0x1.a39ef35793c76p-36;
  constexpr double kShift = 0x1.8p52;
  const Vec shifted = x * kEightOverLn2 + kShift;
  const Vec n = shifted - kShift;
  const Vec r = (x - n * kLn2Over8Hi) - n * kLn2Over8Lo;
  Vec p = splat(1.0 / 40320.0);  // 1/8!
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // The low mantissa bits of `shifted` hold n + 2^51: its low three bits are n mod 8, and shifting right by
  // three leaves floor(n/8) + 2^48, whose 2^48 the exponent shift drops.
  const VecBits bits = std::bit_cast<VecBits>(shifted);
  const Vec fraction = exp2_eighths(std::bit_cast<VecMask>(bits & 7u));
  return (p * fraction) * std::bit_cast<Vec>(((bits >> 3) + 1023u) << 52);
}

}  // namespace
}  // namespace crl::learners::cpu
