#pragma once
// Expects `fn` to throw wire::ApiError with this HTTP status and code; returns it (for further checks).
#include <gtest/gtest.h>

#include <string>

#include "wire/api_error.h"

namespace crl::server::testing {

template <typename Fn>
wire::ApiError expect_error(Fn&& fn, int status, const std::string& code) {
  try {
    fn();
  } catch (const wire::ApiError& e) {
    EXPECT_EQ(e.http_status(), status) << e.what();
    EXPECT_EQ(e.code(), code) << e.what();
    return e;
  }
  ADD_FAILURE() << "no ApiError " << code;
  return wire::ApiError(0, "", "");
}

}  // namespace crl::server::testing
