#pragma once
// The parser: tokens -> statements, with jinja2's grammar and operator precedence (lowest first):
//   x if c else y;  or;  and;  not;  comparisons, in, not in;  + -;  ~;  * / // %;  **;  unary - +;
//   then postfix . [] () and filters | / tests `is` (which bind tighter than every binary operator).
// Statements: if/elif/else, for (targets, `if` filter, else), set (names, ns.attr, block set), macro, call,
// break/continue (loopcontrols), generation (Hugging Face's marker, rendered as its body). extends, include,
// import, block, raw, filter blocks and `do` are refused with a syntax error naming the line.
#include <string>
#include <vector>

#include "engine/jinja/ast.h"
#include "engine/jinja/lexer.h"

namespace crl::jinja {

// Throws TemplateError: kSyntax, or kLimit for expressions or blocks nested deeper than `max_depth`.
Body parse(const std::vector<Token>& tokens, const std::string& template_name, int max_depth);

}  // namespace crl::jinja
