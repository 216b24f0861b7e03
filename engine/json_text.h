#pragma once
// Compact JSON text of an nlohmann value whose strings may hold ill-formed UTF-8 (a client's bytes, text
// decoded from byte-level tokens): each ill-formed sequence becomes U+FFFD (engine/utf8.h's convention)
// instead of dump() throwing, so an answer or a file is written whatever was sent. For nlohmann::json and
// nlohmann::ordered_json alike.
#include <string>

namespace crl {

template <class Json>
std::string json_text(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace crl
