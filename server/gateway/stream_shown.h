#pragma once
// What a streamed answer already sent while it was sampled (live_answer.h): the stream's opening events, how
// many bytes of the reasoning and of the content (a prefix of each: live_reply.h), and how many events. Each
// API's stream writer (openai_answer.h, anthropic_codec.h, responses_codec.h) sends the rest once the answer
// is whole; with nothing shown, the whole stream.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace crl::server::gateway {

struct StreamShown {
  bool opened = false;
  size_t reasoning = 0, content = 0;
  uint64_t events = 0;  // the events sent, for an API that numbers them (Responses' sequence_number)
};

// The text of `whole` after the `shown` bytes a stream already sent.
inline std::string_view rest_of(std::string_view whole, size_t shown) {
  return whole.substr(std::min(shown, whole.size()));
}

}  // namespace crl::server::gateway
