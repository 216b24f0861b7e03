#pragma once
// Protobuf string fields must hold valid UTF-8, but text decoded from byte-level tokens (append_text,
// prompt_text, summaries, a trajectory's response_text, the gateway's answers) and request values echoed in
// error messages may not be. valid_utf8() replaces each ill-formed sequence with U+FFFD so that every answer
// and every exported file can be encoded and read back.
//
// Convention: one U+FFFD per maximal subpart (Unicode's recommended practice, chapter 3 "U+FFFD
// Substitution of Maximal Subparts"): a sequence cut short ("\xE2\x82 ") is one U+FFFD, a byte that can
// start nothing (0x80-0xC1, 0xF5-0xFF) is one each. It is what nlohmann's dump with
// error_handler_t::replace, Python's decode(errors="replace") and the WHATWG decoders in browsers and Node
// produce, so a client that decodes the raw bytes itself and one that reads our repaired text see the
// same string (tests WireCodec.InvalidUtf8IsReplaced*).
#include <cstddef>
#include <string>
#include <string_view>

namespace crl {

// The sequence at in[i] (i < in.size()): its length and whether it is well-formed. When it is not, `length`
// is its maximal subpart (at least 1 byte): what one U+FFFD replaces.
struct Utf8Sequence {
  size_t length;
  bool valid;
};

inline Utf8Sequence utf8_sequence(std::string_view in, size_t i) {
  const auto c = static_cast<unsigned char>(in[i]);
  if (c < 0x80) return {1, true};
  size_t trailing = 0;
  unsigned char low = 0x80, high = 0xBF;  // the range of the next byte (narrower after E0, ED, F0, F4)
  if (c >= 0xC2 && c <= 0xDF) {
    trailing = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    trailing = 2;
    if (c == 0xE0) low = 0xA0;   // no overlong forms
    if (c == 0xED) high = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    trailing = 3;
    if (c == 0xF0) low = 0x90;   // no overlong forms
    if (c == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return {1, false};
  }
  for (size_t k = 1; k <= trailing; ++k) {
    if (i + k >= in.size()) return {k, false};
    const auto next = static_cast<unsigned char>(in[i + k]);
    if (next < low || next > high) return {k, false};
    low = 0x80, high = 0xBF;
  }
  return {trailing + 1, true};
}

// The first ill-formed sequence at or after `from` (a start where a sequence begins): where it starts and how
// many bytes it spans; `at` is in.size() when there is none.
struct Utf8Fault {
  size_t at;
  size_t length;
};
inline Utf8Fault next_ill_formed(std::string_view in, size_t from) {
  size_t i = from;
  while (i < in.size()) {
    if (static_cast<unsigned char>(in[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Sequence s = utf8_sequence(in, i);
    if (!s.valid) return {i, s.length};
    i += s.length;
  }
  return {in.size(), 0};
}

// True when nothing needs replacing (the common case: skip the copy).
inline bool is_valid_utf8(std::string_view in) {
  return next_ill_formed(in, 0).at == in.size();
}

// `in` with each ill-formed sequence replaced by U+FFFD; valid text comes back as it is (a copy made by runs,
// so callers need no is_valid_utf8() check first).
inline std::string valid_utf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  size_t run = 0;  // the start of the well-formed bytes not yet copied
  for (Utf8Fault f = next_ill_formed(in, 0); f.at < in.size(); f = next_ill_formed(in, run)) {
    out.append(in.substr(run, f.at - run));
    out += "\xEF\xBF\xBD";  // U+FFFD
    run = f.at + f.length;
  }
  out.append(in.substr(run));
  return out;
}

}  // namespace crl
