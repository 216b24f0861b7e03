#pragma once
// A fast running hash of an episode's state (everything applied so far), reported with every step so that
// two runs can be compared cheaply: same inputs in the same order give the same hash. Two independent
// 64-bit lanes of SplitMix64 mixing (128 bits of state), order-sensitive, about a nanosecond per token.
// Not cryptographic: exports that are pinned use SHA-256 (engine/sha256.h).
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "engine/rng.h"
#include "engine/token.h"

namespace crl {

class StateHasher {
 public:
  void add(uint64_t value) {
    a_ = splitmix64(a_ ^ value);
    b_ = splitmix64(b_ + value + 0x632BE59BD9B4E019ull);
  }
  void add_double(double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    add(bits);
  }
  void add_tokens(std::span<const TokenId> tokens) {
    add(tokens.size());
    for (TokenId t : tokens) add(static_cast<uint32_t>(t));
  }
  void add_text(std::string_view text) {
    add(text.size());
    uint64_t word = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      word = (word << 8) | static_cast<unsigned char>(text[i]);
      if (i % 8 == 7) {
        add(word);
        word = 0;
      }
    }
    add(word);
  }
  // 32 hex digits.
  std::string hex() const {
    static const char* kHex = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 0; i < 16; ++i) {
      out[15 - i] = kHex[(a_ >> (4 * i)) & 15];
      out[31 - i] = kHex[(b_ >> (4 * i)) & 15];
    }
    return out;
  }

 private:
  uint64_t a_ = 0x243F6A8885A308D3ull;
  uint64_t b_ = 0x13198A2E03707344ull;
};

}  // namespace crl
