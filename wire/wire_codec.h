#pragma once
// The request/response codec: one protobuf schema (proto/server.proto) in two encodings.
//  * JSON: protobuf's canonical JSON mapping with the .proto field names, read and written here by reflection
//    over the descriptors (about 30x faster than protobuf's own printer on a session's export, bench_wire;
//    repeated numbers and enums are written a chunk at a time; tests check that protobuf's own parser reads
//    what this writes). Unknown fields are rejected (a typo must not silently fall back to a default); every
//    error names the offending field path ("budget.capacity", "steps[3].action.kind") and what was expected.
//  * Binary protobuf: a field that protobuf keeps as "unknown" (an unknown number, or a known number with the
//    wrong wire type) is rejected the same way.
//  * JSON is read by engine/json_reader.h: nesting deeper than kMaxJsonDepth (64) is json_too_deep, a key
//    repeated in an object (or one field named by both its .proto and its JSON name) is duplicate_key.
//    Error messages quote at most a short prefix of an offending value.
// Every decoding failure throws ApiError 400 with code bad_json | json_too_deep | duplicate_key |
// bad_protobuf | unknown_field | bad_field.
#include <google/protobuf/message.h>

#include <string>
#include <string_view>

namespace crl::wire {

enum class WireFormat { kJson, kProtobuf };

inline constexpr std::string_view kJsonContentType = "application/json";
inline constexpr std::string_view kProtobufContentType = "application/x-protobuf";

// The format named by a Content-Type header (parameters such as "; charset=utf-8" ignored). Empty, text/plain
// and application/x-www-form-urlencoded (curl -d) mean JSON. Anything else throws ApiError 415
// unsupported_media_type.
WireFormat format_from_content_type(std::string_view content_type);
// The answer's format: the Accept header when it names exactly one of ours, else the request's format.
WireFormat response_format(std::string_view accept, WireFormat request_format);
std::string_view content_type(WireFormat format);

// Decodes `body` into `out` (cleared first). An empty JSON body reads as {}.
void decode_message(std::string_view body, WireFormat format, google::protobuf::Message& out);
// Encodes deterministically: the same message gives the same bytes (JSON prints every field, defaults too).
std::string encode_message(const google::protobuf::Message& message, WireFormat format);

}  // namespace crl::wire
