#include "envs/coding_repo/project.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/json_reader.h"
#include "engine/splitmix.h"
#include "envs/trim.h"

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
  auto op = [&]() { return rng.below(4) == 0 ? std::string("*") : arithmetic_ops()[rng.below(2)]; };
  const std::string second = f.params.size() == 3 ? "c" : "b";
  f.body.push_back("    t = a " + op() + " " + (rng.below(2) ? std::string("b") : literal(rng)));
  f.body.push_back("    u = t " + op() + " " + (rng.below(2) ? second : literal(rng)));
  if (want_if || rng.below(2) == 0) {
    f.body.push_back("    if u " + comparison_ops()[rng.below(4)] + " " + std::to_string(rng.range(5, 30)) +
                     ":");
    f.body.push_back("        u = u " + arithmetic_ops()[rng.below(2)] + " " + literal(rng));
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
    const std::vector<std::string> w = words(trim_space(f.body[i]));
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
  std::vector<std::string> w = words(trim_space(line));
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
    for (const auto& o : arithmetic_ops())
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
