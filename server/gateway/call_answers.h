#pragma once
// The small pieces every gateway handler answers and checks with (gateway.cpp's handlers and
// gateway_routes.cpp's routing): a JSON answer, an error in the shape of the call's API, the session id of a
// Bearer token, the method a route takes.
#include <string>
#include <string_view>

#include "server/gateway/anthropic_codec.h"
#include "server/gateway/gateway_error.h"
#include "server/gateway/openai_answer.h"
#include "server/router.h"
#include "wire/wire_codec.h"

namespace crl::server::gateway {

inline HttpAnswer json_answer(int status, std::string body) {
  return HttpAnswer{status, std::string(wire::kJsonContentType), std::move(body), 0};
}

inline HttpAnswer error_answer(const GatewayError& e, bool anthropic) {
  HttpAnswer answer = json_answer(e.status(), anthropic ? anthropic_error_json(e) : openai_error_json(e));
  answer.retry_after = e.retry_after();
  return answer;
}

// The Bearer token of an Authorization header ("" when there is none).
inline std::string bearer(std::string_view authorization) {
  static constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.size() <= kPrefix.size() || authorization.substr(0, kPrefix.size()) != kPrefix) return "";
  return std::string(authorization.substr(kPrefix.size()));
}

inline void require_method(const HttpCall& call, std::string_view method) {
  if (call.method != method) {
    throw GatewayError(405, "invalid_request_error", "method_not_allowed",
                       std::string(call.method) + " is not allowed here (use " + std::string(method) + ")");
  }
}

}  // namespace crl::server::gateway
