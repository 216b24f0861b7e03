#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011, as in Random123 and cuRAND).
//
// Why counter-based: a draw is a pure function of (key, counter), so any episode, role or turn can get its
// own independent stream without sharing state between threads, and the same code gives the same numbers
// on the CPU and inside a CUDA kernel (every function here is CRL_HOST_DEVICE and allocation free).
//
// Streams are keyed by (run seed, task id, sample index, role, ordinal) (DESIGN.md rule 5):
//   Philox key (64 bits) = SplitMix64 chain over (seed, task, sample << 32 | role),
//   Philox counter (128 bits) = (draw index: words 0-1, ordinal: words 2-3).
// So two streams that differ only in ordinal never overlap, and a stream never depends on batch position,
// thread, wall-clock time or arm.
#include <cmath>
#include <cstdint>
#include <span>

#if defined(__CUDACC__)
#define CRL_HOST_DEVICE __host__ __device__
#else
#define CRL_HOST_DEVICE
#endif

namespace crl {

// Roles of a stream. Values are part of the stream key: never renumber them.
enum class StreamRole : uint32_t {
  kEnvironment = 0,  // task generation and environment randomness
  kExecute = 1,      // policy sampling of execution turns
  kSummarize = 2,    // policy sampling of summaries
  kLearner = 3,      // minibatch order, initialisation
  kEvaluation = 4,
  kSimulation = 5,  // simulated latencies (event kernel)
};

struct StreamKey {
  uint64_t seed = 0;
  uint64_t task = 0;
  uint32_t sample = 0;
  StreamRole role = StreamRole::kEnvironment;
  uint64_t ordinal = 0;
};

struct PhiloxCounter {
  uint32_t v[4];
};
struct PhiloxKey {
  uint32_t v[2];
};

// One Philox4x32 block with 10 rounds.
CRL_HOST_DEVICE inline PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key.v[0] += kW0;
      key.v[1] += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = PhiloxCounter{{hi1 ^ ctr.v[1] ^ key.v[0], lo1, hi0 ^ ctr.v[3] ^ key.v[1], lo0}};
  }
  return ctr;
}

// SplitMix64's finalizer: a bijective 64-bit mixer (Steele et al. 2014).
CRL_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

CRL_HOST_DEVICE inline PhiloxKey philox_key(const StreamKey& k) {
  uint64_t h = splitmix64(k.seed);
  h = splitmix64(h ^ k.task);
  h = splitmix64(h ^ ((static_cast<uint64_t>(k.sample) << 32) | static_cast<uint32_t>(k.role)));
  return PhiloxKey{{static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32)}};
}

// A stream of random numbers. Cheap to create (no state beyond 40 bytes); copy it to fork the sequence.
class Rng {
 public:
  CRL_HOST_DEVICE explicit Rng(const StreamKey& key) : key_(philox_key(key)), ordinal_(key.ordinal) {}
  CRL_HOST_DEVICE Rng(PhiloxKey key, uint64_t ordinal) : key_(key), ordinal_(ordinal) {}

  // The block at draw index `block` of this stream (random access, used by kernels).
  CRL_HOST_DEVICE PhiloxCounter block(uint64_t block) const {
    return philox4x32_10(
        PhiloxCounter{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                       static_cast<uint32_t>(ordinal_), static_cast<uint32_t>(ordinal_ >> 32)}},
        key_);
  }

  CRL_HOST_DEVICE uint32_t next_u32() {
    if (used_ == 4) {
      buffer_ = block(blocks_++);
      used_ = 0;
    }
    return buffer_.v[used_++];
  }
  CRL_HOST_DEVICE uint64_t next_u64() {
    const uint64_t hi = next_u32();
    return (hi << 32) | next_u32();
  }
  // Uniform double in [0, 1) with 53 random bits.
  CRL_HOST_DEVICE double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform float in [0, 1) with 24 random bits.
  CRL_HOST_DEVICE float uniform_float() { return static_cast<float>(next_u32() >> 8) * 0x1.0p-24f; }
  CRL_HOST_DEVICE bool bernoulli(double p) { return uniform() < p; }
  // Unbiased integer in [0, n) (Lemire 2019, multiply and reject); n must be > 0.
  CRL_HOST_DEVICE uint32_t uniform_int(uint32_t n) {
    uint64_t m = static_cast<uint64_t>(next_u32()) * n;
    uint32_t low = static_cast<uint32_t>(m);
    if (low < n) {
      const uint32_t threshold = (0u - n) % n;
      while (low < threshold) {
        m = static_cast<uint64_t>(next_u32()) * n;
        low = static_cast<uint32_t>(m);
      }
    }
    return static_cast<uint32_t>(m >> 32);
  }
  // Samples index i with probability softmax(logits)_i by inverting the CDF with one uniform draw.
  // Stable for any logits (the maximum is subtracted); -inf logits are never chosen.
  CRL_HOST_DEVICE int categorical(const double* logits, int n) {
    double max_logit = -INFINITY;
    for (int i = 0; i < n; ++i) max_logit = logits[i] > max_logit ? logits[i] : max_logit;
    double total = 0.0;
    for (int i = 0; i < n; ++i) total += exp(logits[i] - max_logit);
    const double target = uniform() * total;
    double cumulative = 0.0;
    int last_possible = 0;
    for (int i = 0; i < n; ++i) {
      const double w = exp(logits[i] - max_logit);
      if (w > 0.0) last_possible = i;
      cumulative += w;
      if (target < cumulative) return i;
    }
    return last_possible;  // only reached through rounding at the top end
  }
  int categorical(std::span<const double> logits) {
    return categorical(logits.data(), static_cast<int>(logits.size()));
  }

 private:
  PhiloxKey key_;
  uint64_t ordinal_;
  uint64_t blocks_ = 0;
  PhiloxCounter buffer_{};
  int used_ = 4;
};

}  // namespace crl
