#pragma once
// The one error a template raises: a crl::Error whose `where` is "template NAME line N", whose field is the
// kind (below), and whose message says what went wrong. Syntax errors are raised when the template is
// parsed; the others when it is rendered. Never a crash: hostile templates hit a limit (kLimit) instead.
#include <string>

#include "engine/error.h"

namespace crl::jinja {

enum class ErrorKind {
  kSyntax,     // the template does not parse (or uses an unsupported statement)
  kUndefined,  // an undefined value was used where jinja2 raises UndefinedError
  kType,       // an operation on values of the wrong type, a bad filter argument, division by zero
  kRaised,     // the template called raise_exception(message)
  kLimit,      // recursion depth, output size, loop iterations, value size
};

const char* error_kind_name(ErrorKind kind);  // "syntax", "undefined", "type", "raise_exception", "limit"

class TemplateError : public Error {
 public:
  TemplateError(ErrorKind kind, const std::string& template_name, int line, const std::string& message)
      : Error("template " + template_name + " line " + std::to_string(line), error_kind_name(kind), message),
        kind_(kind),
        line_(line) {}
  ErrorKind kind() const { return kind_; }
  int line() const { return line_; }

 private:
  ErrorKind kind_;
  int line_;
};

}  // namespace crl::jinja
