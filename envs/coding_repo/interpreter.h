#pragma once
// The tiny interpreter of the `coding_repo` projects (project.h): straight-line integer functions in a
// Python-like syntax, one statement per line,
//
//   def NAME(a, b):            parameters are integers
//       """Doc string."""
//       t = a * 3              NAME = X  or  NAME = X OP Y   (OP: + - *, 64-bit, overflow is an error)
//       if t > 7:              if X CMP Y:  and a deeper-indented block   (CMP: < <= > >= == !=)
//           t = t - 2
//       return t               return X
//
// and the test-case form "name(1, 2) == 3". The generator (project.cpp) writes this syntax with the same
// token helpers the interpreter reads it with (below). Nothing here depends on the engine.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace crl::coding {

struct TestCase {
  std::string function;
  std::vector<int64_t> args;
  int64_t expected = 0;
};

struct Evaluation {
  bool ok = false;
  int64_t value = 0;
  std::string error;  // "NameError: ...", "SyntaxError: line N: ...", "NoSuchFunction: ..."
};
// Runs `function` defined in `lines` (the lines of one file, without '\n') on `args`.
Evaluation evaluate(const std::vector<std::string>& lines, const std::string& function,
                    const std::vector<int64_t>& args);
std::vector<std::string> split_lines(const std::string& text);
// Single-token variants of a line: each + - * replaced by the others, each literal +-1, each comparison
// replaced by each other comparison. The scripted solver searches these; the generator checks them.
std::vector<std::string> candidate_fixes(const std::string& line);
// Parses "name(1, 2) == 3" (the form of test asserts and failure lines); nullopt if it does not match.
std::optional<TestCase> parse_case(const std::string& text);
std::string format_call(const TestCase& test);  // "name(1, 2)"

// ---- Tokens (shared with the generator) ----
int indent_of(const std::string& line);                // leading spaces
std::vector<std::string> words(const std::string& s);  // split on spaces
bool parse_int(const std::string& s, int64_t& out);    // the whole string is a decimal integer
bool is_identifier(const std::string& s);
bool is_op(const std::string& s);                  // + - *
bool is_comparison(const std::string& s);          // < <= > >= == !=
const std::vector<std::string>& arithmetic_ops();  // {"+", "-", "*"}
const std::vector<std::string>& comparison_ops();  // {"<", "<=", ">", ">=", "==", "!="}

}  // namespace crl::coding
