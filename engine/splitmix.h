#pragma once
// SplitMix64 (Steele, Lea, Flood 2014) as a sequential generator, for the task generators whose output is
// pinned by committed split files and manifests: one 64-bit state, fixed and portable (never std::
// distributions, whose output differs between standard libraries). Keyed random streams for episodes and
// policies use Philox (engine/rng.h) instead.
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/rng.h"

namespace crl {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    const uint64_t out = splitmix64(state_);  // mixes state + golden gamma
    state_ += 0x9E3779B97F4A7C15ull;
    return out;
  }
  // Unbiased integer in [0, n), n < 2^32 (Lemire 2019: multiply the high 32 bits, reject the biased band).
  uint32_t below32(uint32_t n) {
    uint64_t m = (next() >> 32) * n;
    if (static_cast<uint32_t>(m) < n) {
      const uint32_t threshold = (0u - n) % n;
      while (static_cast<uint32_t>(m) < threshold) m = (next() >> 32) * n;
    }
    return static_cast<uint32_t>(m >> 32);
  }
  // Unbiased integer in [0, n), any n > 0: reject the top partial band, then take the remainder.
  uint64_t below64(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return x % n;
  }
  // Fisher-Yates from the back with below32(): the permutation is a function of the seed only.
  template <typename T>
  void shuffle(std::vector<T>& items) {
    for (size_t i = items.size(); i > 1; --i)
      std::swap(items[i - 1], items[below32(static_cast<uint32_t>(i))]);
  }

 private:
  uint64_t state_;
};

}  // namespace crl
