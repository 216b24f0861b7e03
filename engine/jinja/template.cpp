#include "engine/jinja/template.h"

#include "engine/jinja/lexer.h"
#include "engine/jinja/parser.h"
#include "engine/jinja/template_error.h"

namespace crl::jinja {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kSyntax:
      return "syntax";
    case ErrorKind::kUndefined:
      return "undefined";
    case ErrorKind::kType:
      return "type";
    case ErrorKind::kRaised:
      return "raise_exception";
    case ErrorKind::kLimit:
      return "limit";
  }
  return "?";
}

Template Template::parse(std::string_view source, std::string name, Limits limits) {
  Template t;
  t.name_ = std::make_shared<const std::string>(std::move(name));
  t.limits_ = limits;
  const std::vector<Token> tokens = tokenize(source, *t.name_);
  t.body_ = std::make_shared<const Body>(jinja::parse(tokens, *t.name_, limits.max_nesting));
  return t;
}

std::string Template::render(const Dict& variables, int64_t now_unix) const {
  Interpreter interpreter(*name_, limits_, now_unix);
  return interpreter.render(*body_, variables);
}

}  // namespace crl::jinja
