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
// A log-prob as JSON: the float's shortest digits, so that a harness that parses them and rounds to float32
// gets the export's value bit for bit, laid out as Python's repr writes a float ("-0.25", "-3.0", "-0.0001",
// "-1.5e-05", "1e+16": fixed for decimal exponents -4..15, else d.ddde-XX), which is what a Python server
// (vLLM, SGLang) answers for the same value. (nlohmann's dump is not shortest for every double: -74.00244
// comes out -74.00244000000001.) The upstream's answer is JSON, so a log-prob is never infinite or NaN.
void put_logprob(std::string& out, float value);

}  // namespace crl::server::gateway
