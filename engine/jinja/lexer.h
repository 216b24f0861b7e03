#pragma once
// The jinja2 lexer with the settings Hugging Face renders chat templates with (trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False):
//  * newlines are normalized to "\n" and one trailing newline of the template is dropped;
//  * text before "{%-", "{{-", "{#-" loses its trailing whitespace, text after "-%}", "-}}", "-#}" its
//    leading whitespace (newlines included);
//  * trim_blocks: the first newline after a "%}" or "#}" is dropped;
//  * lstrip_blocks: spaces and tabs from the start of a line to a "{%" or "{#" are dropped ("{%+" keeps
//  them);
//  * inside a tag, "}}" / "%}" close it only outside brackets, as jinja2 balances them.
// Comments are dropped here. Tokens carry their 1-based line for error messages.
#include <string>
#include <string_view>
#include <vector>

namespace crl::jinja {

struct Token {
  enum class Type {
    kText,
    kVariableBegin,
    kVariableEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInteger,
    kFloat,
    kOperator,
    kEnd
  };
  Type type = Type::kEnd;
  std::string text;  // the text, name, operator, or the decoded string literal / number spelling
  int line = 1;
};

// Throws TemplateError (kSyntax) naming `template_name` and the line for an unclosed tag, comment or string,
// or a character that starts no token.
std::vector<Token> tokenize(std::string_view source, const std::string& template_name);

}  // namespace crl::jinja
