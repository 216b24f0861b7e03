#pragma once
// Over-long observation text, cut in the middle: what a coding tool's output and a remote environment's
// texts are reduced to before they reach the context (their `max_observation_bytes`).
#include <cstddef>
#include <string>

namespace crl {

// `text` when it fits in `limit` bytes; else its first third and last two thirds of what fits around a marker
// "\n[... N bytes, middle cut ...]\n" (N: the original size), within `limit` bytes (the marker alone when it
// does not fit). Never cuts inside a UTF-8 sequence, so valid UTF-8 stays valid.
std::string cut_middle(std::string text, size_t limit);

}  // namespace crl
