#pragma once
// Copies of kernel results to their output arrays, optionally with non-temporal (streaming) stores.
//
// Why: a learner step over millions of tokens writes four output arrays it will not read again soon. A
// normal store first reads the cache line it writes into (read-for-ownership), so each output byte costs two
// bytes of memory traffic; a streaming store writes whole lines without reading them. For batches that fit
// in cache the normal store is better (the trainer reads the results next), so the caller chooses. The
// values written are the same either way.
#include <cstdint>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace crl::learners::cpu {
namespace {

// dst[0..n) = src[0..n). With `stream`, the 64-byte aligned middle goes out with the widest streaming store
// this translation unit is compiled for (the ends, and builds without SSE2, use normal stores).
inline void store_doubles(double* __restrict dst, const double* __restrict src, int64_t n, bool stream) {
  int64_t i = 0;
#if defined(__SSE2__)
  if (stream) {
    for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 63) != 0; ++i) dst[i] = src[i];
    for (; i + 8 <= n; i += 8) {
#if defined(__AVX512F__)
      _mm512_stream_pd(dst + i, _mm512_loadu_pd(src + i));
#elif defined(__AVX__)
      _mm256_stream_pd(dst + i, _mm256_loadu_pd(src + i));
      _mm256_stream_pd(dst + i + 4, _mm256_loadu_pd(src + i + 4));
#else
      for (int k = 0; k < 8; k += 2) _mm_stream_pd(dst + i + k, _mm_loadu_pd(src + i + k));
#endif
    }
  }
#else
  (void)stream;
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

// Orders the streaming stores before anything the caller does next (they are weakly ordered).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace
}  // namespace crl::learners::cpu
