// libFuzzer target for the request decoder (wire/wire_codec.h), JSON and binary protobuf.
//
// Input: one selector byte, then the body. Bit 0 of the selector picks the encoding (0 JSON, 1 binary);
// bits 1-2 pick the message (CreateEpisodeRequest, StepRequest, BatchStepRequest, ErrorBody). Properties: the
// decoder never crashes and fails only with ApiError; whatever decodes re-encodes, and the re-encoding
// decodes to the same bytes again (encode o decode is idempotent after one round).
//
// Built by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined; tests/fuzz/CMakeLists.txt) with
// CRL_LIBFUZZER defined; the server tests compile the same function without it and replay the seed corpus
// (tests/fuzz/corpus/request_decoder).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "wire/api_error.h"
#include "wire/wire_codec.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote

template <typename M>
void round_trip(std::string_view body, WireFormat format) {
  M message;
  try {
    decode_message(body, format, message);
  } catch (const ApiError& e) {
    if (e.http_status() != 400) std::abort();  // a decoding failure is always a 400
    return;
  }
  const std::string once = encode_message(message, format);
  M again;
  decode_message(once, format, again);  // must not throw
  if (encode_message(again, format) != once) std::abort();
}

int fuzz_request_decoder(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const WireFormat format = (data[0] & 1) ? WireFormat::kProtobuf : WireFormat::kJson;
  switch ((data[0] >> 1) & 3) {
    case 0:
      round_trip<proto::CreateEpisodeRequest>(body, format);
      break;
    case 1:
      round_trip<proto::StepRequest>(body, format);
      break;
    case 2:
      round_trip<proto::BatchStepRequest>(body, format);
      break;
    default:
      round_trip<proto::ErrorBody>(body, format);
      break;
  }
  return 0;
}

}  // namespace crl::server

#ifdef CRL_LIBFUZZER
#include <google/protobuf/stubs/logging.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 in binary strings is logged, not an error
    return true;
  }();
  (void)quiet;
  return crl::server::fuzz_request_decoder(data, size);
}
#endif
