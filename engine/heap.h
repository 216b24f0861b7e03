#pragma once
#include <cstddef>
// Process-wide heap tuning for the long-running, allocation-heavy parts (crl serve and its gateway, the
// language-model policy's training passes, and the benchmarks that measure them), and a hint for the large
// buffers a process fills once (a model's tokenizer.json, its parsed nodes and tables).
//
// Why: glibc returns memory to the kernel eagerly. Blocks above the mmap threshold (128 KiB, rising to at
// most 32 MiB) are unmapped on free, and the top of the heap is trimmed whenever more than 128 KiB is free
// there, so a process that builds and frees request bodies, answers or activations of that size pays a
// system call, a TLB flush and fresh zeroed page faults per request or training pass (measured: 11% of the
// CPU of a server JSON step; a 3.6x slower SFT pass; about 10% of a gateway call's CPU, bench/RESULTS.md).
// Keeping freed blocks in the heap changes no result, only the resident size (freed memory stays mapped up
// to the trim threshold).
namespace crl {

// Idempotent and thread-safe (applied once per process); a no-op where the C library is not glibc.
// Settings: M_MMAP_THRESHOLD 1 GiB (or glibc's cap where it refuses that: 32 MiB on some versions),
// M_TRIM_THRESHOLD 1 GiB, M_TOP_PAD 16 MiB (the heap grows in steps of 16 MiB, not per request).
void keep_freed_memory();

// For a server whose every request frees many small blocks and then asks for a large one (the gateway: a
// call's JSON nodes, strings and vectors, then the next call's body or id text). glibc keeps small freed
// blocks beyond the per-thread cache in its fast bins, unmerged, until a large request merges them all at
// once (malloc_consolidate: about 10% of a gateway call's user-space instructions, bench/RESULTS.md).
// M_MXFAST 0 turns the fast bins off, so such blocks are merged as they are freed: 90.0k instead of 100.3k
// instructions per steady gateway call (callgrind). `crl serve` applies it with keep_freed_memory(); the
// training processes do not (their allocation pattern was not measured to gain). Idempotent and
// thread-safe; a no-op where the C library is not glibc.
void merge_small_blocks_on_free();

// Asks for transparent huge pages (2 MiB) under the whole pages of [data, data + bytes): a buffer about to be
// written for the first time faults in once per 2 MiB instead of once per 4 KiB. Why: loading Gemma 3's
// 33 MB tokenizer.json writes about 150 MB of fresh memory (the file, 1.8 million JSON nodes, the tables),
// and a page fault costs about 10 us on the VMs of this project (a paravirtualized guest). Reading that
// file's JSON took 88-95 ms with its nodes counted, allocated at once and on huge pages
// (JsonDocument::parse_large), against 513-564 ms grown by doubling on 4 KiB pages (bench/RESULTS.md,
// "Loading a tokenizer.json"). For buffers of 4 MiB and more that are written once, not for a server's
// per-request memory (where the kernel may stall a fault to compact memory for a huge page). Changes no
// result; a no-op below 4 MiB, where the kernel has transparent huge pages off, and off Linux.
void prefer_huge_pages(const void* data, size_t bytes);

}  // namespace crl
