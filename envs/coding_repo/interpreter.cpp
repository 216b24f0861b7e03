#include "envs/coding_repo/interpreter.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "envs/trim.h"

namespace crl::coding {
namespace {

struct Frame {
  std::map<std::string, int64_t> vars;
};

struct Interp {
  const std::vector<std::string>& lines;
  Frame frame;
  std::string error;
  bool returned = false;
  int64_t value = 0;

  bool operand(const std::string& token, int line, int64_t& out) {
    if (parse_int(token, out)) return true;
    if (!is_identifier(token)) {
      error = "SyntaxError: line " + std::to_string(line + 1) + ": bad operand '" + token + "'";
      return false;
    }
    auto it = frame.vars.find(token);
    if (it == frame.vars.end()) {
      error = "NameError: name '" + token + "' is not defined";
      return false;
    }
    out = it->second;
    return true;
  }

  bool arith(int64_t a, const std::string& op, int64_t b, int64_t& out) {
    bool overflow = false;
    if (op == "+") overflow = __builtin_add_overflow(a, b, &out);
    if (op == "-") overflow = __builtin_sub_overflow(a, b, &out);
    if (op == "*") overflow = __builtin_mul_overflow(a, b, &out);
    if (overflow) error = "OverflowError: integer overflow";
    return !overflow;
  }

  // Executes lines [begin, end) whose statements are indented deeper than `outer`.
  bool run(int begin, int end) {
    int i = begin;
    while (i < end && !returned) {
      const std::string& raw = lines[i];
      const std::string s = trim_space(raw);
      if (s.empty() || s[0] == '#' || s.rfind("\"\"\"", 0) == 0) {
        ++i;
        continue;
      }
      const int indent = indent_of(raw);
      const std::vector<std::string> w = words(s);
      if (w[0] == "return") {
        if (w.size() != 2) return syntax(i, "expected 'return NAME'");
        if (!operand(w[1], i, value)) return false;
        returned = true;
        return true;
      }
      if (w[0] == "if") {
        // if X CMP Y:   followed by a deeper-indented block
        if (w.size() != 4 || w[3].size() < 2 || w[3].back() != ':' || !is_comparison(w[2])) {
          return syntax(i, "expected 'if X OP Y:'");
        }
        int64_t a = 0, b = 0;
        if (!operand(w[1], i, a) || !operand(w[3].substr(0, w[3].size() - 1), i, b)) return false;
        int j = i + 1;
        while (j < end && (trim_space(lines[j]).empty() || indent_of(lines[j]) > indent)) ++j;
        if (j == i + 1) return syntax(i, "expected an indented block");
        const std::string& c = w[2];
        const bool taken = c == "<"    ? a < b
                           : c == "<=" ? a <= b
                           : c == ">"  ? a > b
                           : c == ">=" ? a >= b
                           : c == "==" ? a == b
                                       : a != b;
        if (taken && !run(i + 1, j)) return false;
        i = j;
        continue;
      }
      if (w.size() >= 3 && w[1] == "=" && is_identifier(w[0])) {
        int64_t a = 0, r = 0;
        if (w.size() == 3) {
          if (!operand(w[2], i, r)) return false;
        } else if (w.size() == 5 && is_op(w[3])) {
          int64_t b = 0;
          if (!operand(w[2], i, a) || !operand(w[4], i, b) || !arith(a, w[3], b, r)) return false;
        } else {
          return syntax(i, "expected 'NAME = X' or 'NAME = X OP Y'");
        }
        frame.vars[w[0]] = r;
        ++i;
        continue;
      }
      return syntax(i, "unknown statement");
    }
    return true;
  }

  bool syntax(int line, const std::string& what) {
    error = "SyntaxError: line " + std::to_string(line + 1) + ": " + what;
    return false;
  }
};

}  // namespace

int indent_of(const std::string& line) {
  int n = 0;
  while (n < static_cast<int>(line.size()) && line[n] == ' ') ++n;
  return n;
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && p == e;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

bool is_op(const std::string& s) {
  return s == "+" || s == "-" || s == "*";
}
bool is_comparison(const std::string& s) {
  return std::find(comparison_ops().begin(), comparison_ops().end(), s) != comparison_ops().end();
}

const std::vector<std::string>& arithmetic_ops() {
  static const std::vector<std::string> ops = {"+", "-", "*"};
  return ops;
}
const std::vector<std::string>& comparison_ops() {
  static const std::vector<std::string> ops = {"<", "<=", ">", ">=", "==", "!="};
  return ops;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Evaluation evaluate(const std::vector<std::string>& lines, const std::string& function,
                    const std::vector<int64_t>& args) {
  Evaluation result;
  const std::string prefix = "def " + function + "(";
  int def = -1;
  for (int i = 0; i < static_cast<int>(lines.size()); ++i) {
    if (lines[i].rfind(prefix, 0) == 0) {
      def = i;
      break;
    }
  }
  if (def < 0) {
    result.error = "NameError: function '" + function + "' is not defined";
    return result;
  }
  const std::string& header = lines[def];
  const size_t close = header.find("):", prefix.size());
  Interp interp{lines, {}, "", false, 0};
  if (close == std::string::npos || trim_space(header.substr(close)) != "):") {
    interp.syntax(def, "expected 'def NAME(PARAMS):'");
    result.error = interp.error;
    return result;
  }
  std::vector<std::string> params;
  for (std::string p : words(header.substr(prefix.size(), close - prefix.size()))) {
    if (!p.empty() && p.back() == ',') p.pop_back();
    params.push_back(p);
  }
  if (params.size() != args.size()) {
    result.error = "TypeError: " + function + "() takes " + std::to_string(params.size()) + " arguments (" +
                   std::to_string(args.size()) + " given)";
    return result;
  }
  for (size_t i = 0; i < params.size(); ++i) interp.frame.vars[params[i]] = args[i];
  int end = def + 1;
  while (end < static_cast<int>(lines.size()) &&
         (trim_space(lines[end]).empty() || indent_of(lines[end]) > 0))
    ++end;
  if (!interp.run(def + 1, end)) {
    result.error = interp.error;
    return result;
  }
  if (!interp.returned) {
    result.error = "TypeError: " + function + "() returned None";
    return result;
  }
  result.ok = true;
  result.value = interp.value;
  return result;
}

std::vector<std::string> candidate_fixes(const std::string& line) {
  std::vector<std::string> out;
  const int indent = indent_of(line);
  const std::vector<std::string> w = words(trim_space(line));
  auto render = [&](const std::vector<std::string>& v) {
    std::string s(indent, ' ');
    for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + v[i];
    return s;
  };
  for (size_t k = 0; k < w.size(); ++k) {
    std::vector<std::string> v = w;
    if (is_op(w[k])) {
      for (const auto& o : arithmetic_ops()) {
        if (o == w[k]) continue;
        v[k] = o;
        out.push_back(render(v));
      }
    } else if (is_comparison(w[k])) {
      for (const auto& c : comparison_ops()) {
        if (c == w[k]) continue;
        v[k] = c;
        out.push_back(render(v));
      }
    } else if (k > 0) {
      const bool colon = w[k].back() == ':';
      int64_t x = 0;
      if (parse_int(colon ? w[k].substr(0, w[k].size() - 1) : w[k], x)) {
        for (int64_t d : {-1, 1}) {
          v[k] = std::to_string(x + d) + (colon ? ":" : "");
          out.push_back(render(v));
        }
      }
    }
  }
  return out;
}

std::optional<TestCase> parse_case(const std::string& text) {
  // name(1, 2) == 3
  const size_t open = text.find('(');
  const size_t close = text.find(')', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || close == std::string::npos || open == 0) return std::nullopt;
  TestCase t;
  t.function = text.substr(0, open);
  if (!is_identifier(t.function)) return std::nullopt;
  std::string args = text.substr(open + 1, close - open - 1);
  for (std::string a : words(args)) {
    if (!a.empty() && a.back() == ',') a.pop_back();
    int64_t v;
    if (!parse_int(a, v)) return std::nullopt;
    t.args.push_back(v);
  }
  const std::string rest = text.substr(close + 1);
  const std::vector<std::string> w = words(trim_space(rest));
  if (w.size() < 2 || w[0] != "==") return std::nullopt;
  std::string e = w[1];
  if (!e.empty() && e.back() == ',') e.pop_back();
  if (!parse_int(e, t.expected)) return std::nullopt;
  return t;
}

std::string format_call(const TestCase& test) {
  std::string out = test.function + "(";
  for (size_t i = 0; i < test.args.size(); ++i) out += (i ? ", " : "") + std::to_string(test.args[i]);
  return out + ")";
}

}  // namespace crl::coding
