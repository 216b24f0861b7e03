#pragma once
// The gateway's errors, shaped as the OpenAI API shapes them ({"error": {"message", "type", "param",
// "code"}}) so that a harness's OpenAI client raises its usual exception types (BadRequestError,
// RateLimitError, APIStatusError with retry). Anthropic routes re-shape the same error (anthropic_codec.h).
#include <stdexcept>
#include <string>

namespace crl::server::gateway {

class GatewayError : public std::runtime_error {
 public:
  // `type`: invalid_request_error | not_found_error | conflict_error | rate_limit_error | upstream_error |
  // timeout_error | server_error. `code`: a stable machine-readable reason. `param`: the request field.
  GatewayError(int status, std::string type, std::string code, const std::string& message,
               std::string param = "")
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        code_(std::move(code)),
        param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }
  const std::string& param() const { return param_; }
  double retry_after() const { return retry_after_; }
  GatewayError& with_retry_after(double seconds) {
    retry_after_ = seconds;
    return *this;
  }

 private:
  int status_;
  std::string type_, code_, param_;
  double retry_after_ = 0;
};

inline GatewayError bad_request(const std::string& code, const std::string& message,
                                const std::string& param = "") {
  return GatewayError(400, "invalid_request_error", code, message, param);
}

}  // namespace crl::server::gateway
