#include "envs/coding_repo/coding_repo.h"

#include <algorithm>
#include <sstream>

#include "engine/error.h"
#include "engine/file_io.h"
#include "envs/command_env.h"
#include "envs/text_cut.h"

namespace crl {
namespace {

bool parse_line_number(const std::string& s, long& out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  out = std::stol(s);
  return true;
}

const char* kCodingRepoSystemPrompt =
    "You are fixing a bug in a small software repository. Work with exactly one command per reply:\n"
    "  ls                       list the files\n"
    "  cat FILE [START END]     show numbered lines of a file\n"
    "  grep PATTERN             find a literal text in every file\n"
    "  edit FILE LINE NEW_TEXT  replace one line of a source file (keep its indentation)\n"
    "  run_tests                run the visible tests\n"
    "  submit                   finish; hidden tests decide the reward\n"
    "Tests and README.md are read-only. Reply with the command only.";

}  // namespace

Budget coding_budget() {
  Budget b;
  b.capacity = 4096;
  b.reserve = 1024;
  b.tail_k = 2;
  b.per_turn_cap = 128;
  b.summary_cap = 768;
  b.max_compactions = 6;
  return b;
}

CodingRepo::CodingRepo(CodingRepoConfig config) : config_(std::move(config)) {
  spec_.name = "coding_repo";
  spec_.description = "a generated multi-file project with one injected bug, graded by hidden tests";
  spec_.params = param_specs();
  spec_.has_text = true;
  spec_.text_budget = coding_budget();
  spec_.max_observation_bytes = config_.max_observation_bytes;
}

std::vector<ParamSpec> CodingRepo::param_specs() {
  return {
      {"source", ParamType::kString, "generated",
       "generated (the project is a function of the task id) | data (read data_dir/<split>.jsonl)"},
      {"data_dir", ParamType::kString, "data/coding_repo",
       "folder of the split files (source = data); a host path: server configuration only", true},
      {"page_lines", ParamType::kInt, "40", "most lines one cat shows"},
      {"max_turns", ParamType::kInt, "64", "turn limit (then truncated, reward 0)"},
      {"max_invalid", ParamType::kInt, "8", "invalid commands before truncation"},
      {"grep_max", ParamType::kInt, "30", "most grep matches shown"},
      {"max_observation_bytes", ParamType::kInt, "4096", "observations longer than this keep head and tail"},
  };
}

CodingRepoConfig CodingRepo::config_from(const Params& params) {
  const std::string where = "environment \"coding_repo\"";
  CodingRepoConfig c;
  c.source = params.get_string("source");
  if (c.source != "generated" && c.source != "data") {
    throw Error(where, "source", "value " + quote(c.source) + " is not one of generated, data");
  }
  c.data_dir = params.get_string("data_dir");
  const auto positive = [&](const char* name, int64_t lo) { return params.get_int_at_least(name, lo); };
  c.page_lines = static_cast<int>(positive("page_lines", 1));
  c.max_turns = static_cast<int>(positive("max_turns", 1));
  c.max_invalid = static_cast<int>(positive("max_invalid", 1));
  c.grep_max = static_cast<int>(positive("grep_max", 1));
  c.max_observation_bytes = static_cast<size_t>(positive("max_observation_bytes", 256));
  return c;
}

coding::Project CodingRepo::load(const Task& task) {
  if (config_.source == "generated") {
    try {
      return coding::generate_project(task.id, coding::bug_kind_for(task.id), task.split);
    } catch (const std::exception& e) {
      throw Error("task " + quote(task.id), "id", e.what());
    }
  }
  if (task.split.empty()) throw Error("task " + quote(task.id), "split", "source = data needs a split");
  auto it = data_cache_.find(task.split);
  if (it == data_cache_.end()) {
    const std::string path = config_.data_dir + "/" + task.split + ".jsonl";
    std::vector<coding::Project> projects;
    std::istringstream in(read_file(path));
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      if (line.empty()) continue;
      try {
        projects.push_back(coding::project_from_json(line));
      } catch (const std::exception& e) {
        throw Error(path + ":" + std::to_string(number), "", e.what());
      }
    }
    it = data_cache_.emplace(task.split, std::move(projects)).first;
  }
  for (const auto& p : it->second) {
    if (p.id == task.id) return p;
  }
  throw Error("task " + quote(task.id), "id",
              "not in split " + quote(task.split) + " of " + config_.data_dir);
}

CodingRepo::Start CodingRepo::do_reset(const Task& task, Rng&) {
  project_ = load(task);
  files_.clear();
  for (const auto& f : project_.files) files_[f.path] = coding::split_lines(f.text);
  invalid_ = 0;
  Start start;
  start.system.text = kCodingRepoSystemPrompt;
  start.user.text = "Repository " + project_.id + " (" + std::to_string(files_.size()) +
                    " files). Its test suite fails. Find the bug, fix it, make the tests pass, then submit.";
  return start;
}

std::string CodingRepo::file_text(const std::string& path) const {
  auto it = files_.find(path);
  if (it == files_.end()) throw Error("coding_repo", "path", "no file " + quote(path));
  std::string out;
  for (const auto& l : it->second) out += l + "\n";
  return out;
}

std::string CodingRepo::cmd_ls() const {
  std::string out;
  for (const auto& [path, lines] : files_) out += path + "  (" + std::to_string(lines.size()) + " lines)\n";
  return out;
}

std::string CodingRepo::cmd_cat(const std::vector<std::string>& args) const {
  if (args.size() != 1 && args.size() != 3) return "ERROR: usage: cat FILE [START END]";
  auto it = files_.find(args[0]);
  if (it == files_.end()) return "ERROR: no such file: " + args[0] + " (try ls)";
  const long total = static_cast<long>(it->second.size());
  long start = 1, end = total;
  if (args.size() == 3 &&
      (!parse_line_number(args[1], start) || !parse_line_number(args[2], end) || start < 1 || end < start)) {
    return "ERROR: START and END must be line numbers with 1 <= START <= END";
  }
  end = std::min({end, total, start + config_.page_lines - 1});
  if (start > total) return "ERROR: " + args[0] + " has only " + std::to_string(total) + " lines";
  std::ostringstream out;
  out << "==> " << args[0] << " (lines " << start << "-" << end << " of " << total << ") <==\n";
  for (long i = start; i <= end; ++i) {
    char number[16];
    std::snprintf(number, sizeof number, "%4d| ", static_cast<int>(i));
    out << number << it->second[i - 1] << "\n";
  }
  if (end < total) out << "(more: cat " << args[0] << " " << end + 1 << " " << total << ")\n";
  return out.str();
}

std::string CodingRepo::cmd_grep(const std::string& raw) const {
  std::string pattern = trim_space(raw);
  if (pattern.size() >= 2 && (pattern[0] == '"' || pattern[0] == '\'') && pattern.back() == pattern[0]) {
    pattern = pattern.substr(1, pattern.size() - 2);
  }
  if (pattern.empty()) return "ERROR: usage: grep PATTERN";
  std::string out;
  int matches = 0, shown = 0;
  for (const auto& [path, lines] : files_) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].find(pattern) == std::string::npos) continue;
      if (++matches <= config_.grep_max) {
        out += path + ":" + std::to_string(i + 1) + ": " + lines[i] + "\n";
        ++shown;
      }
    }
  }
  if (matches == 0) return "no match for " + pattern;
  if (matches > shown) out += "(" + std::to_string(matches - shown) + " more matches)\n";
  return out;
}

std::string CodingRepo::cmd_edit(const std::string& rest) {
  // rest = "FILE LINE NEW_TEXT": the new text is everything after the single space following LINE.
  const size_t a = rest.find(' ');
  const size_t b = a == std::string::npos ? std::string::npos : rest.find(' ', a + 1);
  if (a == std::string::npos) return "ERROR: usage: edit FILE LINE NEW_TEXT";
  const std::string path = rest.substr(0, a);
  const std::string number = b == std::string::npos ? rest.substr(a + 1) : rest.substr(a + 1, b - a - 1);
  const std::string text = b == std::string::npos ? "" : rest.substr(b + 1);
  auto it = files_.find(path);
  if (it == files_.end()) return "ERROR: no such file: " + path;
  if (path.rfind("src/", 0) != 0) return "ERROR: " + path + " is read-only (only src/ files can be edited)";
  long line = 0;
  if (!parse_line_number(number, line) || line < 1 || line > static_cast<long>(it->second.size())) {
    return "ERROR: LINE must be between 1 and " + std::to_string(it->second.size());
  }
  if (text.find('\n') != std::string::npos) return "ERROR: NEW_TEXT must be one line";
  const std::string before = it->second[line - 1];
  it->second[line - 1] = text;
  return "edited " + path + " line " + std::to_string(line) + "\n- " + before + "\n+ " + text;
}

std::string CodingRepo::cmd_run_tests() const {
  std::string out, failures;
  int passed = 0, failed = 0;
  for (const auto& [path, lines] : files_) {
    if (path.rfind("tests/test_", 0) != 0) continue;
    const std::string module = "src/" + path.substr(11);
    auto src = files_.find(module);
    std::string test_name;
    for (const auto& line : lines) {
      const std::string s = trim_space(line);
      if (s.rfind("def test_", 0) == 0) {
        test_name = s.substr(4, s.find('(') - 4);
      } else if (s.rfind("assert ", 0) == 0 && !test_name.empty()) {
        const auto test = coding::parse_case(s.substr(7));
        std::string verdict;
        if (!test) {
          verdict = "ERROR: cannot parse: " + s;
        } else if (src == files_.end()) {
          verdict = "ERROR: no module " + module;
        } else {
          const coding::Evaluation e = coding::evaluate(src->second, test->function, test->args);
          if (e.ok && e.value == test->expected) {
            verdict = "PASSED";
          } else if (e.ok) {
            verdict = "FAILED: " + coding::format_call(*test) + " == " + std::to_string(test->expected) +
                      ", got " + std::to_string(e.value);
          } else {
            verdict = "FAILED: " + coding::format_call(*test) + " == " + std::to_string(test->expected) +
                      ", raised " + e.error;
          }
        }
        (verdict == "PASSED" ? passed : failed) += 1;
        out += path + "::" + test_name + " " + verdict + "\n";
        if (verdict != "PASSED") failures += path + "::" + test_name + " " + verdict + "\n";
        test_name.clear();
      }
    }
  }
  // Like pytest's short summary: the failures again at the end, where a truncated view still shows them.
  if (!failures.empty()) out += "== short test summary ==\n" + failures;
  out += "== " + std::to_string(passed) + " passed, " + std::to_string(failed) + " failed ==";
  return out;
}

std::string CodingRepo::run_command(const std::string& line, StepResult& result) {
  std::istringstream in(line);
  std::string command;
  in >> command;
  std::vector<std::string> args;
  for (std::string w; in >> w;) args.push_back(w);
  const std::string rest = line.size() > command.size() ? line.substr(command.size() + 1) : "";
  if (command == "ls" && args.empty()) return cmd_ls();
  if (command == "cat") return cmd_cat(args);
  if (command == "grep") return cmd_grep(rest);
  if (command == "edit") return cmd_edit(rest);
  if (command == "run_tests" && args.empty()) return cmd_run_tests();
  if (command == "submit" && args.empty()) {
    int passed = 0;
    for (const auto& t : project_.hidden) {
      const std::string path = [&] {
        for (const auto& [p, lines] : files_) {
          for (const auto& l : lines)
            if (p.rfind("src/", 0) == 0 && l.rfind("def " + t.function + "(", 0) == 0) return p;
        }
        return std::string();
      }();
      if (path.empty()) continue;
      const coding::Evaluation e = coding::evaluate(files_.at(path), t.function, t.args);
      passed += e.ok && e.value == t.expected;
    }
    const bool all = passed == static_cast<int>(project_.hidden.size());
    result.terminated = true;
    result.reward = all ? 1.0 : 0.0;
    result.info =
        std::to_string(passed) + "/" + std::to_string(project_.hidden.size()) + " hidden tests passed";
    return "submitted: " + result.info;
  }
  ++invalid_;
  result.info = "invalid command";
  std::string shown = line.substr(0, 60);
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) > 126) c = '?';
  return "ERROR: invalid command \"" + shown +
         "\". Commands: ls | cat FILE [START END] | grep PATTERN | edit FILE LINE NEW_TEXT | run_tests | "
         "submit";
}

StepResult CodingRepo::do_step(const Action& action) {
  StepResult result;
  // The command is the first non-empty line of the action.
  std::string line;
  std::istringstream in(action.text);
  while (std::getline(in, line)) {
    if (!trim_space(line).empty()) break;
  }
  line = trim_space(line);
  std::string text = run_command(line, result);
  const std::string limit =
      result.terminated ? "" : turn_limit_reason(invalid_, config_.max_invalid, steps(), config_.max_turns);
  if (!limit.empty()) {
    result.truncated = true;
    result.info = limit;
  }
  result.observation.text = cut_middle(std::move(text), config_.max_observation_bytes);
  return result;
}

namespace {
const EnvRegistrar kCodingRepoRegistrar(command_env_entry<CodingRepo>(
    "coding_repo", "a generated repository with one injected bug (envs/coding_repo)"));
}  // namespace

}  // namespace crl
