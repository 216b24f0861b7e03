#pragma once
// Typed errors of the HTTP API. Every failure the server answers carries an ErrorBody {code, message, field}
// and an HTTP status; handlers throw ApiError, the router catches it (and crl::Error, which becomes a 400
// naming the same field) and writes the body. Nothing else escapes a request.
#include <stdexcept>
#include <string>

#include "proto/server.pb.h"
#include "wire/utf8.h"

namespace crl::wire {

class ApiError : public std::runtime_error {
 public:
  ApiError(int http_status, std::string code, std::string message, std::string field = "")
      : std::runtime_error(valid_utf8(message)),
        http_status_(http_status),
        code_(std::move(code)),
        field_(valid_utf8(field)) {}

  int http_status() const { return http_status_; }
  const std::string& code() const { return code_; }
  const std::string& field() const { return field_; }
  double retry_after() const { return retry_after_; }
  ApiError& with_retry_after(double seconds) {
    retry_after_ = seconds;
    return *this;
  }
  proto::ErrorBody body() const {
    proto::ErrorBody b;
    b.set_code(code_);
    b.set_message(what());
    b.set_field(field_);
    if (retry_after_ > 0) b.set_retry_after(retry_after_);
    return b;
  }

 private:
  int http_status_;
  std::string code_;
  std::string field_;
  double retry_after_ = 0;
};

}  // namespace crl::wire
