#include "server/gateway/answer_writer.h"

#include "engine/json_escape.h"
#include "wire/utf8.h"

namespace crl::server::gateway {

void put_string(std::string& out, std::string_view s) {
  if (wire::is_valid_utf8(s)) {
    append_json_string(out, s);
  } else {  // nlohmann's replacement of ill-formed sequences, which wire::valid_utf8 shares (wire/utf8.h)
    append_json_string(out, wire::valid_utf8(s));
  }
}

}  // namespace crl::server::gateway
