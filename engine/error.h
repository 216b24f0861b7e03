#pragma once
// Errors, in two kinds (DESIGN.md rule 10):
//  * crl::Error: recoverable bad input (a malformed file, an unknown env, a bad request). It names where the
//    problem is (file or request), which field, which value, and what was expected, so a user can fix it.
//    It is thrown at boundaries and caught by the CLI (one line, exit 1) or the server (typed error body).
//  * CRL_CHECK: a broken invariant of our own code. It prints file:line and the condition and aborts; it is
//    always on. CRL_DCHECK is the same for hot loops, compiled out in release builds.
#include <sstream>
#include <stdexcept>
#include <string>

namespace crl {

class Error : public std::runtime_error {
 public:
  // `where` is a file name, "file:line:column", or a request path; `field` is the offending field (may be
  // empty); `message` says what was found and what was expected.
  Error(std::string where, std::string field, std::string message);
  explicit Error(std::string message) : Error("", "", std::move(message)) {}

  const std::string& where() const { return where_; }
  const std::string& field() const { return field_; }
  const std::string& message() const { return message_; }

 private:
  std::string where_, field_, message_;
};

// Formats any streamable value for error messages, quoting strings so that empty values are visible.
template <typename T>
std::string quote(const T& value) {
  std::ostringstream out;
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out << '"' << std::string_view(value) << '"';
  } else {
    out << value;
  }
  return out.str();
}

[[noreturn]] void fatal(const char* file, int line, const std::string& message);

}  // namespace crl

#define CRL_CHECK(cond, msg)                                     \
  do {                                                           \
    if (!(cond)) {                                               \
      std::ostringstream crl_check_stream_;                      \
      crl_check_stream_ << "check failed: " #cond ": " << msg;   \
      ::crl::fatal(__FILE__, __LINE__, crl_check_stream_.str()); \
    }                                                            \
  } while (false)

#ifdef NDEBUG
#define CRL_DCHECK(cond, msg) \
  do {                        \
  } while (false)
#else
#define CRL_DCHECK(cond, msg) CRL_CHECK(cond, msg)
#endif
