#include "engine/sha256.h"

#include <gtest/gtest.h>

namespace crl {
namespace {

// FIPS 180-4 examples and the NIST one-million-'a' vector.
TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAcrossBlockBoundaries) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>('a' + i % 26);
  for (size_t split : {0, 1, 55, 56, 63, 64, 65, 128, 299}) {
    Sha256 h;
    h.update(text.substr(0, split)).update(text.substr(split));
    EXPECT_EQ(h.hex_digest(), sha256_hex(text)) << "split at " << split;
  }
}

TEST(Sha256, U64IsTheFirstEightBytesBigEndian) {
  EXPECT_EQ(sha256_u64("abc"), 0xba7816bf8f01cfeaull);
}

}  // namespace
}  // namespace crl
