#include "engine/decimal_double.h"

#include <bit>
#include <cstring>

namespace crl {
namespace {

// The 128-bit significands of 10^q, q in [kMinQ, kMaxQ], rounded down, bit 127 set: 10^q is about
// (hi * 2^64 + lo) * 2^(floor(q * log2(10)) - 127). Written by this Python (exact integers), and checked
// entry by entry by tests/engine/decimal_double_test.cpp (with exact integers of its own):
//   def entry(q):
//       if q >= 0:
//           v = 10**q; b = v.bit_length()
//           m = v >> (b - 128) if b >= 128 else v << (128 - b)
//       else:
//           d = 10**(-q); k = 127 + d.bit_length(); m = (1 << k) // d
//           while m.bit_length() > 128: k -= 1; m = (1 << k) // d
//           while m.bit_length() < 128: k += 1; m = (1 << k) // d
//       return m >> 64, m & (2**64 - 1)
constexpr int kMinQ = -96, kMaxQ = 64;
constexpr uint64_t kPowersOfTen[kMaxQ - kMinQ + 1][2] = {
    {0x88b402f7fd75539bull, 0x11dbcb0218ebb414ull},  // 1e-96
    {0xaae103b5fcd2a881ull, 0xd652bdc29f26a119ull},  // 1e-95
    {0xd59944a37c0752a2ull, 0x4be76d3346f0495full},  // 1e-94
    {0x857fcae62d8493a5ull, 0x6f70a4400c562ddbull},  // 1e-93
    {0xa6dfbd9fb8e5b88eull, 0xcb4ccd500f6bb952ull},  // 1e-92
    {0xd097ad07a71f26b2ull, 0x7e2000a41346a7a7ull},  // 1e-91
    {0x825ecc24c873782full, 0x8ed400668c0c28c8ull},  // 1e-90
    {0xa2f67f2dfa90563bull, 0x728900802f0f32faull},  // 1e-89
    {0xcbb41ef979346bcaull, 0x4f2b40a03ad2ffb9ull},  // 1e-88
    {0xfea126b7d78186bcull, 0xe2f610c84987bfa8ull},  // 1e-87
    {0x9f24b832e6b0f436ull, 0x0dd9ca7d2df4d7c9ull},  // 1e-86
    {0xc6ede63fa05d3143ull, 0x91503d1c79720dbbull},  // 1e-85
    {0xf8a95fcf88747d94ull, 0x75a44c6397ce912aull},  // 1e-84
    {0x9b69dbe1b548ce7cull, 0xc986afbe3ee11abaull},  // 1e-83
    {0xc24452da229b021bull, 0xfbe85badce996168ull},  // 1e-82
    {0xf2d56790ab41c2a2ull, 0xfae27299423fb9c3ull},  // 1e-81
    {0x97c560ba6b0919a5ull, 0xdccd879fc967d41aull},  // 1e-80
    {0xbdb6b8e905cb600full, 0x5400e987bbc1c920ull},  // 1e-79
    {0xed246723473e3813ull, 0x290123e9aab23b68ull},  // 1e-78
    {0x9436c0760c86e30bull, 0xf9a0b6720aaf6521ull},  // 1e-77
    {0xb94470938fa89bceull, 0xf808e40e8d5b3e69ull},  // 1e-76
    {0xe7958cb87392c2c2ull, 0xb60b1d1230b20e04ull},  // 1e-75
    {0x90bd77f3483bb9b9ull, 0xb1c6f22b5e6f48c2ull},  // 1e-74
    {0xb4ecd5f01a4aa828ull, 0x1e38aeb6360b1af3ull},  // 1e-73
    {0xe2280b6c20dd5232ull, 0x25c6da63c38de1b0ull},  // 1e-72
    {0x8d590723948a535full, 0x579c487e5a38ad0eull},  // 1e-71
    {0xb0af48ec79ace837ull, 0x2d835a9df0c6d851ull},  // 1e-70
    {0xdcdb1b2798182244ull, 0xf8e431456cf88e65ull},  // 1e-69
    {0x8a08f0f8bf0f156bull, 0x1b8e9ecb641b58ffull},  // 1e-68
    {0xac8b2d36eed2dac5ull, 0xe272467e3d222f3full},  // 1e-67
    {0xd7adf884aa879177ull, 0x5b0ed81dcc6abb0full},  // 1e-66
    {0x86ccbb52ea94baeaull, 0x98e947129fc2b4e9ull},  // 1e-65
    {0xa87fea27a539e9a5ull, 0x3f2398d747b36224ull},  // 1e-64
    {0xd29fe4b18e88640eull, 0x8eec7f0d19a03aadull},  // 1e-63
    {0x83a3eeeef9153e89ull, 0x1953cf68300424acull},  // 1e-62
    {0xa48ceaaab75a8e2bull, 0x5fa8c3423c052dd7ull},  // 1e-61
    {0xcdb02555653131b6ull, 0x3792f412cb06794dull},  // 1e-60
    {0x808e17555f3ebf11ull, 0xe2bbd88bbee40bd0ull},  // 1e-59
    {0xa0b19d2ab70e6ed6ull, 0x5b6aceaeae9d0ec4ull},  // 1e-58
    {0xc8de047564d20a8bull, 0xf245825a5a445275ull},  // 1e-57
    {0xfb158592be068d2eull, 0xeed6e2f0f0d56712ull},  // 1e-56
    {0x9ced737bb6c4183dull, 0x55464dd69685606bull},  // 1e-55
    {0xc428d05aa4751e4cull, 0xaa97e14c3c26b886ull},  // 1e-54
    {0xf53304714d9265dfull, 0xd53dd99f4b3066a8ull},  // 1e-53
    {0x993fe2c6d07b7fabull, 0xe546a8038efe4029ull},  // 1e-52
    {0xbf8fdb78849a5f96ull, 0xde98520472bdd033ull},  // 1e-51
    {0xef73d256a5c0f77cull, 0x963e66858f6d4440ull},  // 1e-50
    {0x95a8637627989aadull, 0xdde7001379a44aa8ull},  // 1e-49
    {0xbb127c53b17ec159ull, 0x5560c018580d5d52ull},  // 1e-48
    {0xe9d71b689dde71afull, 0xaab8f01e6e10b4a6ull},  // 1e-47
    {0x9226712162ab070dull, 0xcab3961304ca70e8ull},  // 1e-46
    {0xb6b00d69bb55c8d1ull, 0x3d607b97c5fd0d22ull},  // 1e-45
    {0xe45c10c42a2b3b05ull, 0x8cb89a7db77c506aull},  // 1e-44
    {0x8eb98a7a9a5b04e3ull, 0x77f3608e92adb242ull},  // 1e-43
    {0xb267ed1940f1c61cull, 0x55f038b237591ed3ull},  // 1e-42
    {0xdf01e85f912e37a3ull, 0x6b6c46dec52f6688ull},  // 1e-41
    {0x8b61313bbabce2c6ull, 0x2323ac4b3b3da015ull},  // 1e-40
    {0xae397d8aa96c1b77ull, 0xabec975e0a0d081aull},  // 1e-39
    {0xd9c7dced53c72255ull, 0x96e7bd358c904a21ull},  // 1e-38
    {0x881cea14545c7575ull, 0x7e50d64177da2e54ull},  // 1e-37
    {0xaa242499697392d2ull, 0xdde50bd1d5d0b9e9ull},  // 1e-36
    {0xd4ad2dbfc3d07787ull, 0x955e4ec64b44e864ull},  // 1e-35
    {0x84ec3c97da624ab4ull, 0xbd5af13bef0b113eull},  // 1e-34
    {0xa6274bbdd0fadd61ull, 0xecb1ad8aeacdd58eull},  // 1e-33
    {0xcfb11ead453994baull, 0x67de18eda5814af2ull},  // 1e-32
    {0x81ceb32c4b43fcf4ull, 0x80eacf948770ced7ull},  // 1e-31
    {0xa2425ff75e14fc31ull, 0xa1258379a94d028dull},  // 1e-30
    {0xcad2f7f5359a3b3eull, 0x096ee45813a04330ull},  // 1e-29
    {0xfd87b5f28300ca0dull, 0x8bca9d6e188853fcull},  // 1e-28
    {0x9e74d1b791e07e48ull, 0x775ea264cf55347dull},  // 1e-27
    {0xc612062576589ddaull, 0x95364afe032a819dull},  // 1e-26
    {0xf79687aed3eec551ull, 0x3a83ddbd83f52204ull},  // 1e-25
    {0x9abe14cd44753b52ull, 0xc4926a9672793542ull},  // 1e-24
    {0xc16d9a0095928a27ull, 0x75b7053c0f178293ull},  // 1e-23
    {0xf1c90080baf72cb1ull, 0x5324c68b12dd6338ull},  // 1e-22
    {0x971da05074da7beeull, 0xd3f6fc16ebca5e03ull},  // 1e-21
    {0xbce5086492111aeaull, 0x88f4bb1ca6bcf584ull},  // 1e-20
    {0xec1e4a7db69561a5ull, 0x2b31e9e3d06c32e5ull},  // 1e-19
    {0x9392ee8e921d5d07ull, 0x3aff322e62439fcfull},  // 1e-18
    {0xb877aa3236a4b449ull, 0x09befeb9fad487c2ull},  // 1e-17
    {0xe69594bec44de15bull, 0x4c2ebe687989a9b3ull},  // 1e-16
    {0x901d7cf73ab0acd9ull, 0x0f9d37014bf60a10ull},  // 1e-15
    {0xb424dc35095cd80full, 0x538484c19ef38c94ull},  // 1e-14
    {0xe12e13424bb40e13ull, 0x2865a5f206b06fb9ull},  // 1e-13
    {0x8cbccc096f5088cbull, 0xf93f87b7442e45d3ull},  // 1e-12
    {0xafebff0bcb24aafeull, 0xf78f69a51539d748ull},  // 1e-11
    {0xdbe6fecebdedd5beull, 0xb573440e5a884d1bull},  // 1e-10
    {0x89705f4136b4a597ull, 0x31680a88f8953030ull},  // 1e-9
    {0xabcc77118461cefcull, 0xfdc20d2b36ba7c3dull},  // 1e-8
    {0xd6bf94d5e57a42bcull, 0x3d32907604691b4cull},  // 1e-7
    {0x8637bd05af6c69b5ull, 0xa63f9a49c2c1b10full},  // 1e-6
    {0xa7c5ac471b478423ull, 0x0fcf80dc33721d53ull},  // 1e-5
    {0xd1b71758e219652bull, 0xd3c36113404ea4a8ull},  // 1e-4
    {0x83126e978d4fdf3bull, 0x645a1cac083126e9ull},  // 1e-3
    {0xa3d70a3d70a3d70aull, 0x3d70a3d70a3d70a3ull},  // 1e-2
    {0xccccccccccccccccull, 0xccccccccccccccccull},  // 1e-1
    {0x8000000000000000ull, 0x0000000000000000ull},  // 1e0
    {0xa000000000000000ull, 0x0000000000000000ull},  // 1e1
    {0xc800000000000000ull, 0x0000000000000000ull},  // 1e2
    {0xfa00000000000000ull, 0x0000000000000000ull},  // 1e3
    {0x9c40000000000000ull, 0x0000000000000000ull},  // 1e4
    {0xc350000000000000ull, 0x0000000000000000ull},  // 1e5
    {0xf424000000000000ull, 0x0000000000000000ull},  // 1e6
    {0x9896800000000000ull, 0x0000000000000000ull},  // 1e7
    {0xbebc200000000000ull, 0x0000000000000000ull},  // 1e8
    {0xee6b280000000000ull, 0x0000000000000000ull},  // 1e9
    {0x9502f90000000000ull, 0x0000000000000000ull},  // 1e10
    {0xba43b74000000000ull, 0x0000000000000000ull},  // 1e11
    {0xe8d4a51000000000ull, 0x0000000000000000ull},  // 1e12
    {0x9184e72a00000000ull, 0x0000000000000000ull},  // 1e13
    {0xb5e620f480000000ull, 0x0000000000000000ull},  // 1e14
    {0xe35fa931a0000000ull, 0x0000000000000000ull},  // 1e15
    {0x8e1bc9bf04000000ull, 0x0000000000000000ull},  // 1e16
    {0xb1a2bc2ec5000000ull, 0x0000000000000000ull},  // 1e17
    {0xde0b6b3a76400000ull, 0x0000000000000000ull},  // 1e18
    {0x8ac7230489e80000ull, 0x0000000000000000ull},  // 1e19
    {0xad78ebc5ac620000ull, 0x0000000000000000ull},  // 1e20
    {0xd8d726b7177a8000ull, 0x0000000000000000ull},  // 1e21
    {0x878678326eac9000ull, 0x0000000000000000ull},  // 1e22
    {0xa968163f0a57b400ull, 0x0000000000000000ull},  // 1e23
    {0xd3c21bcecceda100ull, 0x0000000000000000ull},  // 1e24
    {0x84595161401484a0ull, 0x0000000000000000ull},  // 1e25
    {0xa56fa5b99019a5c8ull, 0x0000000000000000ull},  // 1e26
    {0xcecb8f27f4200f3aull, 0x0000000000000000ull},  // 1e27
    {0x813f3978f8940984ull, 0x4000000000000000ull},  // 1e28
    {0xa18f07d736b90be5ull, 0x5000000000000000ull},  // 1e29
    {0xc9f2c9cd04674edeull, 0xa400000000000000ull},  // 1e30
    {0xfc6f7c4045812296ull, 0x4d00000000000000ull},  // 1e31
    {0x9dc5ada82b70b59dull, 0xf020000000000000ull},  // 1e32
    {0xc5371912364ce305ull, 0x6c28000000000000ull},  // 1e33
    {0xf684df56c3e01bc6ull, 0xc732000000000000ull},  // 1e34
    {0x9a130b963a6c115cull, 0x3c7f400000000000ull},  // 1e35
    {0xc097ce7bc90715b3ull, 0x4b9f100000000000ull},  // 1e36
    {0xf0bdc21abb48db20ull, 0x1e86d40000000000ull},  // 1e37
    {0x96769950b50d88f4ull, 0x1314448000000000ull},  // 1e38
    {0xbc143fa4e250eb31ull, 0x17d955a000000000ull},  // 1e39
    {0xeb194f8e1ae525fdull, 0x5dcfab0800000000ull},  // 1e40
    {0x92efd1b8d0cf37beull, 0x5aa1cae500000000ull},  // 1e41
    {0xb7abc627050305adull, 0xf14a3d9e40000000ull},  // 1e42
    {0xe596b7b0c643c719ull, 0x6d9ccd05d0000000ull},  // 1e43
    {0x8f7e32ce7bea5c6full, 0xe4820023a2000000ull},  // 1e44
    {0xb35dbf821ae4f38bull, 0xdda2802c8a800000ull},  // 1e45
    {0xe0352f62a19e306eull, 0xd50b2037ad200000ull},  // 1e46
    {0x8c213d9da502de45ull, 0x4526f422cc340000ull},  // 1e47
    {0xaf298d050e4395d6ull, 0x9670b12b7f410000ull},  // 1e48
    {0xdaf3f04651d47b4cull, 0x3c0cdd765f114000ull},  // 1e49
    {0x88d8762bf324cd0full, 0xa5880a69fb6ac800ull},  // 1e50
    {0xab0e93b6efee0053ull, 0x8eea0d047a457a00ull},  // 1e51
    {0xd5d238a4abe98068ull, 0x72a4904598d6d880ull},  // 1e52
    {0x85a36366eb71f041ull, 0x47a6da2b7f864750ull},  // 1e53
    {0xa70c3c40a64e6c51ull, 0x999090b65f67d924ull},  // 1e54
    {0xd0cf4b50cfe20765ull, 0xfff4b4e3f741cf6dull},  // 1e55
    {0x82818f1281ed449full, 0xbff8f10e7a8921a4ull},  // 1e56
    {0xa321f2d7226895c7ull, 0xaff72d52192b6a0dull},  // 1e57
    {0xcbea6f8ceb02bb39ull, 0x9bf4f8a69f764490ull},  // 1e58
    {0xfee50b7025c36a08ull, 0x02f236d04753d5b4ull},  // 1e59
    {0x9f4f2726179a2245ull, 0x01d762422c946590ull},  // 1e60
    {0xc722f0ef9d80aad6ull, 0x424d3ad2b7b97ef5ull},  // 1e61
    {0xf8ebad2b84e0d58bull, 0xd2e0898765a7deb2ull},  // 1e62
    {0x9b934c3b330c8577ull, 0x63cc55f49f88eb2full},  // 1e63
    {0xc2781f49ffcfa6d5ull, 0x3cbf6b71c76b25fbull},  // 1e64
};

// Exact doubles 10^0 .. 10^22 (Clinger's fast path).
constexpr double kExactPowers[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                   1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

struct Product {
  uint64_t hi, lo;
};
Product multiply(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return {static_cast<uint64_t>(p >> 64), static_cast<uint64_t>(p)};
}

}  // namespace

bool power_of_ten_significand(int q, uint64_t& hi, uint64_t& lo) {
  if (q < kMinQ || q > kMaxQ) return false;
  hi = kPowersOfTen[q - kMinQ][0];
  lo = kPowersOfTen[q - kMinQ][1];
  return true;
}

std::optional<double> decimal_to_double(uint64_t w, int q, bool negative) {
  if (w == 0) return negative ? -0.0 : 0.0;
  // Clinger: w and 10^|q| exact doubles, so one multiplication or division rounds once, correctly.
  if (w <= (uint64_t{1} << 53) && q >= -22 && q <= 22) {
    double d = static_cast<double>(w);
    d = q < 0 ? d / kExactPowers[-q] : d * kExactPowers[q];
    return negative ? -d : d;
  }
  if (q < kMinQ || q > kMaxQ) return std::nullopt;
  // Eisel-Lemire.
  const int clz = std::countl_zero(w);
  w <<= clz;
  constexpr int64_t kBias = 1023;
  // floor(q * log2(10)) + 64 + bias - clz: 217706 / 2^16 is log2(10) to within the table's range.
  uint64_t exponent = static_cast<uint64_t>(((int64_t{217706} * q) >> 16) + 64 + kBias - clz);
  const uint64_t* power = kPowersOfTen[q - kMinQ];
  Product x = multiply(w, power[0]);
  if ((x.hi & 0x1FF) == 0x1FF && x.lo + w < w) {  // the low bits may carry: the wider product
    const Product y = multiply(w, power[1]);
    uint64_t merged_hi = x.hi;
    const uint64_t merged_lo = x.lo + y.hi;
    if (merged_lo < x.lo) ++merged_hi;
    if ((merged_hi & 0x1FF) == 0x1FF && merged_lo + 1 == 0 && y.lo + w < w) return std::nullopt;
    x = {merged_hi, merged_lo};
  }
  const uint64_t msb = x.hi >> 63;
  uint64_t mantissa = x.hi >> (msb + 9);
  exponent -= 1 ^ msb;
  if (x.lo == 0 && (x.hi & 0x1FF) == 0 && (mantissa & 3) == 1) return std::nullopt;  // maybe halfway
  mantissa += mantissa & 1;  // 54 bits to 53, ties to even
  mantissa >>= 1;
  if (mantissa >> 53 > 0) {
    mantissa >>= 1;
    ++exponent;
  }
  if (exponent - 1 >= 0x7FF - 1) return std::nullopt;  // subnormal, zero, infinite: from_chars decides
  uint64_t bits = exponent << 52 | (mantissa & ((uint64_t{1} << 52) - 1));
  if (negative) bits |= uint64_t{1} << 63;
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

}  // namespace crl
