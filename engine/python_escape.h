#pragma once
// One escape of a Python string literal, for the readers of Python-like text: Jinja's string literals
// (engine/jinja/lexer.cpp) and pythonic tool calls (server/gateway/python_calls.h).
#include <string>
#include <string_view>

namespace crl {

// `text[pos]` is the character after a backslash: appends what the escape stands for to `out` and moves
// `pos` past it. Python's rules: \n \t \r \a \b \f \v \\ \' \", \xHH, \uHHHH, \UHHHHHHHH (a surrogate is
// appended as its three bytes, which are not valid UTF-8: a caller that needs UTF-8 checks), octal \o to
// \ooo, a backslash before a newline continues the line (nothing appended), and any other character keeps
// its backslash. Returns false when a \x, \u or \U escape is cut short (fewer hex digits than it needs) or
// `pos` is past the end.
bool append_python_escape(std::string_view text, size_t& pos, std::string& out);

}  // namespace crl
