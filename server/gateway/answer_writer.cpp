#include "server/gateway/answer_writer.h"

#include <nlohmann/json.hpp>

#include "engine/json_escape.h"
#include "wire/utf8.h"

namespace crl::server::gateway {

void put_string(std::string& out, std::string_view s) {
  if (wire::is_valid_utf8(s)) {
    append_json_string(out, s);
  } else {  // nlohmann's replacement of ill-formed sequences (U+FFFD)
    out += nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

}  // namespace crl::server::gateway
