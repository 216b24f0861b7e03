#pragma once
// SHA-256 (FIPS 180-4). Used wherever a hash is pinned or shown to users: split manifests, trajectory and
// state hashes, and derived sampling seeds (spec section 5). Platform independent by construction.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace crl {

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, size_t size);
  Sha256& update(std::string_view text) { return update(text.data(), text.size()); }
  // Integers are hashed as 8 little-endian bytes, so hashes do not depend on the host's byte order.
  Sha256& update_u64(uint64_t value);
  Sha256& update_f64(double value);  // the IEEE-754 bit pattern
  std::array<uint8_t, 32> digest();  // finishes the hash; the object must not be updated afterwards
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

std::string sha256_hex(std::string_view text);
// The first 8 bytes of the digest, big-endian, as an integer.
uint64_t sha256_u64(std::string_view text);

}  // namespace crl
