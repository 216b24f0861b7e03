#include "envs/coding_repo/project.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/json_reader.h"
#include "engine/splitmix.h"

namespace crl::coding {
namespace {

// The generator (engine/splitmix.h, the same SplitMix64 the synthetic suite uses) with the draws this
// generator was pinned with: below64 for every integer.
class SplitMix : public SplitMix64 {
 public:
  using SplitMix64::SplitMix64;
  uint64_t below(uint64_t n) { return below64(n); }
  int64_t range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo + 1)));
  }
  template <typename T>
  const T& pick(const std::vector<T>& items) {
    return items[below(items.size())];
  }
};

const std::vector<std::string> kModules = {"pricing", "inventory", "billing",  "metrics",
                                           "routing", "scoring",   "shipping", "payroll"};
const std::vector<std::string> kVerbs = {"scale", "adjust", "merge", "clamp", "score",
                                         "count", "shift",  "blend", "rank",  "weigh"};
const std::vector<std::string> kNouns = {"total", "price",  "bonus", "offset", "weight",
                                         "level", "margin", "quota", "delay",  "budget"};
const std::vector<std::string> kProjectNames = {"ledgerkit", "stockpile", "tallyho",    "fareplan",
                                                "metricore", "routewise", "scoreboard", "parcelpost"};
const std::vector<std::string> kOps = {"+", "-", "*"};
const std::vector<std::string> kComparisons = {"<", "<=", ">", ">=", "==", "!="};

int indent_of(const std::string& line) {
  int n = 0;
  while (n < static_cast<int>(line.size()) && line[n] == ' ') ++n;
  return n;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
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
  return std::find(kComparisons.begin(), kComparisons.end(), s) != kComparisons.end();
}

// ---- Interpreter ----
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
      const std::string s = trim(raw);
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
        while (j < end && (trim(lines[j]).empty() || indent_of(lines[j]) > indent)) ++j;
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

// ---- Generation ----
struct Function {
  std::string name;
  std::vector<std::string> params;
  std::vector<std::string> body;  // indented statement lines (without the def and docstring)
  std::string doc;
};

std::string literal(SplitMix& rng) {
  return std::to_string(rng.range(2, 9));
}

Function make_function(SplitMix& rng, const std::string& name, const std::string& module, bool want_if) {
  Function f;
  f.name = name;
  f.params = rng.below(2) == 0 ? std::vector<std::string>{"a", "b"} : std::vector<std::string>{"a", "b", "c"};
  const std::string verb = name.substr(0, name.find('_'));
  const std::string noun = name.substr(name.find('_') + 1);
  std::string cap = verb;
  cap[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(cap[0])));
  f.doc = cap + "s the " + noun + " of " +
          (std::string("aeiou").find(module[0]) == std::string::npos ? "a " : "an ") + module + " record.";
  auto op = [&]() { return rng.below(4) == 0 ? std::string("*") : kOps[rng.below(2)]; };
  const std::string second = f.params.size() == 3 ? "c" : "b";
  f.body.push_back("    t = a " + op() + " " + (rng.below(2) ? std::string("b") : literal(rng)));
  f.body.push_back("    u = t " + op() + " " + (rng.below(2) ? second : literal(rng)));
  if (want_if || rng.below(2) == 0) {
    f.body.push_back("    if u " + kComparisons[rng.below(4)] + " " + std::to_string(rng.range(5, 30)) + ":");
    f.body.push_back("        u = u " + kOps[rng.below(2)] + " " + literal(rng));
  }
  if (rng.below(2) == 0) {
    f.body.push_back("    v = u " + op() + " " + (rng.below(2) ? std::string("a") : literal(rng)));
    f.body.push_back("    return v");
  } else {
    f.body.push_back("    return u");
  }
  return f;
}

std::vector<std::string> function_lines(const Function& f) {
  std::string params;
  for (const auto& p : f.params) params += (params.empty() ? "" : ", ") + p;
  std::vector<std::string> out = {"def " + f.name + "(" + params + "):", "    \"\"\"" + f.doc + "\"\"\""};
  out.insert(out.end(), f.body.begin(), f.body.end());
  return out;
}

// Line indices (into f.body) a bug of `kind` can go on, and the mutated text.
std::vector<int> bug_sites(const Function& f, const std::string& kind) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(f.body.size()); ++i) {
    const std::vector<std::string> w = words(trim(f.body[i]));
    bool ok = false;
    for (size_t k = 0; k < w.size(); ++k) {
      int64_t v;
      if (kind == "operator" && w[0] != "if" && is_op(w[k])) ok = true;
      if (kind == "constant" && k > 0 &&
          parse_int(w[k].back() == ':' ? w[k].substr(0, w[k].size() - 1) : w[k], v))
        ok = true;
      if (kind == "comparison" && w[0] == "if") ok = true;
    }
    if (ok) out.push_back(i);
  }
  return out;
}

std::string mutate(SplitMix& rng, const std::string& line, const std::string& kind) {
  const int indent = indent_of(line);
  std::vector<std::string> w = words(trim(line));
  std::vector<size_t> spots;
  for (size_t k = 0; k < w.size(); ++k) {
    int64_t v;
    const std::string bare = w[k].back() == ':' ? w[k].substr(0, w[k].size() - 1) : w[k];
    if (kind == "operator" && is_op(w[k])) spots.push_back(k);
    if (kind == "constant" && k > 0 && parse_int(bare, v)) spots.push_back(k);
    if (kind == "comparison" && is_comparison(w[k])) spots.push_back(k);
  }
  const size_t k = spots[rng.below(spots.size())];
  if (kind == "operator") {
    std::vector<std::string> others;
    for (const auto& o : kOps)
      if (o != w[k]) others.push_back(o);
    w[k] = rng.pick(others);
  } else if (kind == "constant") {
    const bool colon = w[k].back() == ':';
    int64_t v = 0;
    parse_int(colon ? w[k].substr(0, w[k].size() - 1) : w[k], v);
    v += rng.below(2) ? 1 : -1;
    w[k] = std::to_string(v) + (colon ? ":" : "");
  } else {
    static const std::map<std::string, std::string> flip = {{"<", "<="}, {"<=", "<"},  {">", ">="},
                                                            {">=", ">"}, {"==", "!="}, {"!=", "=="}};
    w[k] = flip.at(w[k]);
  }
  std::string out(indent, ' ');
  for (size_t i = 0; i < w.size(); ++i) out += (i ? " " : "") + w[i];
  return out;
}

bool passes(const std::vector<std::string>& lines, const TestCase& t) {
  const Evaluation e = evaluate(lines, t.function, t.args);
  return e.ok && e.value == t.expected;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace

const std::vector<std::string>& bug_kinds() {
  static const std::vector<std::string> kinds = {"operator", "constant", "comparison"};
  return kinds;
}

uint64_t project_seed(const std::string& task_id) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64 over "coding_repo|" + id
  for (char c : "coding_repo|" + task_id) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ull;
  }
  return SplitMix(h).next();
}

std::string bug_kind_for(const std::string& task_id) {
  for (const auto& kind : bug_kinds()) {
    if (task_id.rfind("repo-" + kind + "-", 0) == 0) return kind;
  }
  return bug_kinds()[project_seed(task_id) % bug_kinds().size()];
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
  if (close == std::string::npos || trim(header.substr(close)) != "):") {
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
  while (end < static_cast<int>(lines.size()) && (trim(lines[end]).empty() || indent_of(lines[end]) > 0))
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
  const std::vector<std::string> w = words(trim(line));
  auto render = [&](const std::vector<std::string>& v) {
    std::string s(indent, ' ');
    for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + v[i];
    return s;
  };
  for (size_t k = 0; k < w.size(); ++k) {
    std::vector<std::string> v = w;
    if (is_op(w[k])) {
      for (const auto& o : kOps) {
        if (o == w[k]) continue;
        v[k] = o;
        out.push_back(render(v));
      }
    } else if (is_comparison(w[k])) {
      for (const auto& c : kComparisons) {
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
  const std::vector<std::string> w = words(trim(rest));
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

Project generate_project(const std::string& task_id, const std::string& bug_kind, const std::string& split) {
  if (std::find(bug_kinds().begin(), bug_kinds().end(), bug_kind) == bug_kinds().end()) {
    throw std::invalid_argument("unknown bug kind '" + bug_kind +
                                "' (expected operator, constant or comparison)");
  }
  const uint64_t seed = project_seed(task_id);
  // Bounded retries: each attempt is a fresh deterministic draw; the checks of the header decide.
  for (uint64_t attempt = 0; attempt < 1000; ++attempt) {
    SplitMix rng(seed ^ (attempt * 0xD1B54A32D192ED03ull));
    const std::string project_name = rng.pick(kProjectNames);
    std::vector<std::string> modules = kModules;
    for (size_t i = modules.size() - 1; i > 0; --i) std::swap(modules[i], modules[rng.below(i + 1)]);
    modules.resize(3);
    std::sort(modules.begin(), modules.end());
    // Three functions per module, names distinct across the project.
    std::vector<std::vector<Function>> functions(modules.size());
    std::vector<std::string> used;
    const size_t bug_module = rng.below(modules.size());
    const size_t bug_index = rng.below(3);
    for (size_t m = 0; m < modules.size(); ++m) {
      for (int k = 0; k < 3; ++k) {
        std::string name;
        do name = rng.pick(kVerbs) + "_" + rng.pick(kNouns);
        while (std::find(used.begin(), used.end(), name) != used.end());
        used.push_back(name);
        const bool want_if =
            bug_kind == "comparison" && m == bug_module && static_cast<size_t>(k) == bug_index;
        functions[m].push_back(make_function(rng, name, modules[m], want_if));
      }
    }
    Function& buggy = functions[bug_module][bug_index];
    const std::vector<int> sites = bug_sites(buggy, bug_kind);
    if (sites.empty()) continue;
    const int site = sites[rng.below(sites.size())];
    const std::string original = buggy.body[site];
    const std::string broken = mutate(rng, original, bug_kind);
    if (broken == original) continue;
    const std::vector<std::string> good_lines = function_lines(buggy);
    buggy.body[site] = broken;
    const std::vector<std::string> bad_lines = function_lines(buggy);

    // Test cases: random arguments, expected values from the correct code. The buggy function gets one
    // revealing case (where the bug changes the result) among its visible and its hidden tests.
    auto draw_args = [&](const Function& f, int64_t hi) {
      std::vector<int64_t> a;
      for (size_t p = 0; p < f.params.size(); ++p) a.push_back(rng.range(0, hi));
      return a;
    };
    std::vector<std::vector<TestCase>> visible(modules.size());
    std::vector<TestCase> hidden;
    bool ok = true;
    for (size_t m = 0; m < modules.size() && ok; ++m) {
      for (size_t k = 0; k < 3 && ok; ++k) {
        const Function& f = functions[m][k];
        const bool is_bug = m == bug_module && k == bug_index;
        const std::vector<std::string>& truth = is_bug ? good_lines : function_lines(f);
        auto make_case = [&](std::vector<int64_t> args) {
          TestCase t{f.name, std::move(args), 0};
          const Evaluation e = evaluate(truth, f.name, t.args);
          t.expected = e.value;
          return t;
        };
        auto revealing = [&](int64_t hi) -> std::optional<TestCase> {
          for (int tries = 0; tries < 400; ++tries) {
            TestCase t = make_case(draw_args(f, hi));
            if (!passes(bad_lines, t)) return t;
          }
          return std::nullopt;
        };
        for (int i = 0; i < 4; ++i) visible[m].push_back(make_case(draw_args(f, 9)));
        for (int i = 0; i < 6; ++i) hidden.push_back(make_case(draw_args(f, 12)));
        if (is_bug) {
          const auto v = revealing(9), h = revealing(12);
          if (!v || !h) {
            ok = false;
            break;
          }
          visible[m][1 + rng.below(3)] = *v;
          hidden[hidden.size() - 1 - rng.below(6)] = *h;
        }
      }
    }
    if (!ok) continue;
    // Every single-token repair of the buggy function that passes its visible tests must pass its hidden
    // tests too (so the visible tests identify the fix).
    std::vector<TestCase> bug_visible, bug_hidden;
    for (const auto& t : visible[bug_module])
      if (t.function == buggy.name) bug_visible.push_back(t);
    for (const auto& t : hidden)
      if (t.function == buggy.name) bug_hidden.push_back(t);
    for (size_t line = 0; line < bad_lines.size() && ok; ++line) {
      for (const std::string& variant : candidate_fixes(bad_lines[line])) {
        std::vector<std::string> trial = bad_lines;
        trial[line] = variant;
        const bool fits = std::all_of(bug_visible.begin(), bug_visible.end(),
                                      [&](const TestCase& t) { return passes(trial, t); });
        if (fits && !std::all_of(bug_hidden.begin(), bug_hidden.end(),
                                 [&](const TestCase& t) { return passes(trial, t); })) {
          ok = false;
          break;
        }
      }
    }
    if (!ok) continue;

    // Render the files.
    Project p;
    p.id = task_id;
    p.bug_kind = bug_kind;
    p.split = split;
    p.seed = seed;
    p.hidden = hidden;
    p.bug_function = buggy.name;
    p.original_line = original;
    std::string readme = "# " + project_name + "\n\n" + project_name + " is a small service library with " +
                         std::to_string(modules.size()) + " modules: ";
    for (size_t m = 0; m < modules.size(); ++m) {
      readme += modules[m] + (m + 2 < modules.size() ? ", " : m + 1 < modules.size() ? " and " : ".\n");
    }
    readme +=
        "Each module lives in src/ and is tested by tests/test_<module>.py; the command `run_tests` runs "
        "every test and prints one line per test.\n\n## Modules\n\n";
    for (size_t m = 0; m < modules.size(); ++m) {
      readme += "- src/" + modules[m] + ".py:";
      for (const auto& f : functions[m]) readme += " " + f.name;
      readme += "\n";
    }
    readme +=
        "\n## Status\n\nA recent change broke one function, and some tests fail. Find the bug, fix the line "
        "with `edit`, make every test pass, then `submit`. Hidden tests grade the submission.\n";
    p.files.push_back({"README.md", readme});
    for (size_t m = 0; m < modules.size(); ++m) {
      std::vector<std::string> src = {"# " + modules[m] + ".py: helpers of the " + modules[m] + " service.",
                                      "# Integer arithmetic only; every function returns an int.", ""};
      for (size_t k = 0; k < functions[m].size(); ++k) {
        if (m == bug_module && k == bug_index) {
          p.bug_file = "src/" + modules[m] + ".py";
          p.bug_line = static_cast<int>(src.size()) + 3 + site;  // def + docstring precede the body
        }
        for (const auto& l : function_lines(functions[m][k])) src.push_back(l);
        src.push_back("");
        src.push_back("");
      }
      while (!src.empty() && src.back().empty()) src.pop_back();
      p.files.push_back({"src/" + modules[m] + ".py", join_lines(src)});
      std::string names;
      for (const auto& f : functions[m]) names += (names.empty() ? "" : ", ") + f.name;
      std::vector<std::string> test = {"# Tests of src/" + modules[m] + ".py (run them with run_tests).",
                                       "from src." + modules[m] + " import " + names};
      std::map<std::string, int> counter;
      for (const auto& t : visible[m]) {
        test.push_back("");
        test.push_back("");
        test.push_back("def test_" + t.function + "_" + std::to_string(++counter[t.function]) + "():");
        test.push_back("    assert " + format_call(t) + " == " + std::to_string(t.expected));
      }
      p.files.push_back({"tests/test_" + modules[m] + ".py", join_lines(test)});
    }
    std::sort(p.files.begin(), p.files.end(), [](const File& a, const File& b) { return a.path < b.path; });
    return p;
  }
  throw std::runtime_error("coding_repo: no valid project for task '" + task_id + "' after 1000 draws");
}

std::string project_to_json(const Project& p) {
  nlohmann::json j;
  j["id"] = p.id;
  j["bug_kind"] = p.bug_kind;
  j["split"] = p.split;
  j["seed"] = std::to_string(p.seed);
  j["files"] = nlohmann::json::array();
  for (const auto& f : p.files) j["files"].push_back({{"path", f.path}, {"text", f.text}});
  j["hidden"] = nlohmann::json::array();
  for (const auto& t : p.hidden) j["hidden"].push_back(format_call(t) + " == " + std::to_string(t.expected));
  j["bug"] = {{"file", p.bug_file},
              {"line", p.bug_line},
              {"function", p.bug_function},
              {"original", p.original_line}};
  return j.dump();
}

Project project_from_json(const std::string& line) {
  nlohmann::json j;
  try {
    j = read_json(line, "project");  // depth limit, duplicate keys (engine/json_reader.h)
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("not JSON: ") + e.what());
  }
  Project p;
  try {
    p.id = j.at("id").get<std::string>();
    p.bug_kind = j.at("bug_kind").get<std::string>();
    p.split = j.at("split").get<std::string>();
    p.seed = std::stoull(j.at("seed").get<std::string>());
    for (const auto& f : j.at("files"))
      p.files.push_back({f.at("path").get<std::string>(), f.at("text").get<std::string>()});
    for (const auto& t : j.at("hidden")) {
      const auto test = parse_case(t.get<std::string>());
      if (!test)
        throw std::invalid_argument("bad hidden test " + json_preview(t) + " (expected \"f(1, 2) == 3\")");
      p.hidden.push_back(*test);
    }
    const auto& bug = j.at("bug");
    p.bug_file = bug.at("file").get<std::string>();
    p.bug_line = bug.at("line").get<int>();
    p.bug_function = bug.at("function").get<std::string>();
    p.original_line = bug.at("original").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("bad project record: ") + e.what());
  }
  return p;
}

std::map<std::string, std::string> generate_splits(int per_kind_train, int per_kind_dev, int per_kind_test) {
  // Hidden tests are stored compactly ("f(1, 2) == 3") to keep the committed data small.
  std::map<std::string, std::string> out;
  const std::vector<std::pair<std::string, int>> splits = {
      {"train", per_kind_train}, {"dev", per_kind_dev}, {"test", per_kind_test}};
  for (const auto& [split, count] : splits) {
    std::string text;
    for (int i = 0; i < count; ++i) {
      for (const auto& kind : bug_kinds()) {
        char index[16];
        std::snprintf(index, sizeof index, "%04d", i);
        const std::string id = "repo-" + kind + "-" + split + "-" + index;
        text += project_to_json(generate_project(id, kind, split)) + "\n";
      }
    }
    out[split + ".jsonl"] = text;
  }
  return out;
}

}  // namespace crl::coding
