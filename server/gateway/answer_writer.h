#pragma once
// Pieces of the gateway's hand-written answers (openai_codec.cpp, anthropic_codec.cpp). Each answer is
// written byte for byte as nlohmann's dump of the same object wrote it (keys in sorted order, its escapes,
// ill-formed UTF-8 replaced by U+FFFD; tests GatewayCodec.*AreByteIdenticalToNlohmannsDump): building the
// object and dumping it cost more than the rest of the answer path (a quarter of an Anthropic turn's
// instructions, bench/RESULTS.md ninth pass).
#include <string>
#include <string_view>

namespace crl::server::gateway {

// `s` as a JSON string, as nlohmann's dump with error_handler_t::replace writes it.
void put_string(std::string& out, std::string_view s);

}  // namespace crl::server::gateway
