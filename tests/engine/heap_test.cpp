// The process-wide heap settings of crl serve (engine/heap.h) as glibc reports its heap (mallinfo2).
#include "engine/heap.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace crl {
namespace {

#if defined(__GLIBC__)
// With the fast bins off, small blocks freed beyond the per-thread cache (7 of a size) are merged when freed:
// none waits in a fast bin (mallinfo2's fsmblks) for a large request to consolidate it. Before the call,
// the same frees leave blocks there (glibc's default), so the test shows the setting took.
TEST(Heap, SmallBlocksAreMergedWhenFreed) {
#if defined(__SANITIZE_ADDRESS__) || defined(CRL_TSAN)
  GTEST_SKIP() << "the sanitizer's allocator replaces glibc's heap, which this test measures";
#endif
  const auto free_small_blocks = [] {
    std::vector<void*> blocks;
    for (int i = 0; i < 256; ++i) blocks.push_back(std::malloc(48));
    for (void* block : blocks) std::free(block);
    return mallinfo2().fsmblks;
  };
  if (mallopt(M_MXFAST, 128) == 1) {  // glibc's default, in case an earlier test changed it
    EXPECT_GT(free_small_blocks(), 0u) << "fast bins hold freed small blocks by default";
  }
  merge_small_blocks_on_free();  // (the first call in this process: nothing else here makes it)
  EXPECT_EQ(free_small_blocks(), 0u);
}
#endif

}  // namespace
}  // namespace crl
