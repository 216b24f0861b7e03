#include "engine/heap.h"

#include <mutex>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace crl {

void keep_freed_memory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    // Where glibc refuses a threshold this high (some versions cap it at 32 MiB on 64-bit), the cap.
    if (mallopt(M_MMAP_THRESHOLD, 1 << 30) == 0) mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_TOP_PAD, 16 << 20);
  });
#endif
}

void merge_small_blocks_on_free() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] { mallopt(M_MXFAST, 0); });
#endif
}

}  // namespace crl
