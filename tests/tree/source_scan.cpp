#include "tests/tree/source_scan.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <regex>
#include <sstream>

namespace crl::test {
namespace fs = std::filesystem;

namespace {

bool has_extension(const fs::path& file, std::initializer_list<const char*> extensions) {
  const std::string ext = file.extension().string();
  return std::any_of(extensions.begin(), extensions.end(), [&](const char* e) { return ext == e; });
}

bool is_cxx_source(const fs::path& file) {
  return has_extension(file, {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc"});
}

// Every regular file under root/folder, sorted, as paths relative to the root (a missing folder is empty).
std::vector<fs::path> files_under(const fs::path& root, const std::string& folder) {
  std::vector<fs::path> files;
  const fs::path top = root / folder;
  if (!fs::is_directory(top)) return files;
  for (auto it = fs::recursive_directory_iterator(top); it != fs::recursive_directory_iterator(); ++it) {
    // Installed packages (the tokenizer oracle's node_modules) and Python caches are not our sources.
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name == "node_modules" || name == "__pycache__" || name == "corpus")) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(fs::relative(it->path(), root));
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> read_lines(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

std::string first_component(const fs::path& relative) {
  return relative.empty() ? "" : relative.begin()->string();
}

// The top-level folder an include names, or "" when it is not in the tree (a system or library header).
std::string included_folder(const fs::path& root, const fs::path& including, const std::string& target,
                            bool quoted) {
  if (quoted) {
    // "x.h" beside the including file, or a spelled-out relative path such as "../server/x.h".
    const fs::path beside = (root / including.parent_path() / target).lexically_normal();
    const bool spelled_relative = target.rfind("../", 0) == 0 || target.rfind("./", 0) == 0;
    if (spelled_relative || fs::exists(beside)) {
      const fs::path relative = beside.lexically_relative(root.lexically_normal());
      const std::string top = first_component(relative);
      return top == ".." ? "" : top;
    }
  }
  const std::string top = first_component(fs::path(target).lexically_normal());
  if (target.find('/') == std::string::npos || top == ".." || !fs::is_directory(root / top)) return "";
  return top;
}

}  // namespace

std::string describe(const std::vector<Finding>& findings) {
  std::ostringstream out;
  for (const Finding& f : findings) out << f.file << ":" << f.line << ": " << f.why << ": " << f.text << "\n";
  return out.str();
}

LayeringRules design_layering() {
  // DESIGN.md's table ("depends on"), plus proto/ (generated message headers, no code of ours) everywhere,
  // and the README's stated deviations: policies/ on envs/ (the rollout driver runs Episodes) and on
  // learners/ (a trainable policy owns its learner facade, policies/trainable.h). wire/ is shared by server/
  // and envs/ and depends on neither; server/ and envs/ never include each other's code. ui/ (the viewer's
  // page and its data) depends on the engine only; server/ serves it.
  return {
      {"engine", {"engine", "proto"}},
      {"wire", {"wire", "engine", "proto"}},
      {"envs", {"envs", "engine", "wire", "proto"}},
      {"learners", {"learners", "engine", "proto"}},
      {"policies", {"policies", "engine", "envs", "learners", "proto"}},
      {"ui", {"ui", "engine", "proto"}},
      {"server", {"server", "engine", "envs", "policies", "wire", "ui", "proto"}},
  };
}

std::vector<Finding> layering_violations(const fs::path& root, const LayeringRules& rules) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  std::vector<Finding> findings;
  for (const auto& [folder, allowed] : rules) {
    for (const fs::path& file : files_under(root, folder)) {
      if (!is_cxx_source(file)) continue;
      const std::vector<std::string> lines = read_lines(root / file);
      for (size_t i = 0; i < lines.size(); ++i) {
        std::smatch m;
        if (!std::regex_search(lines[i], m, kInclude)) continue;
        const std::string target = included_folder(root, file, m[2].str(), m[1].str() == "\"");
        if (target.empty() || allowed.count(target) != 0) continue;
        findings.push_back(Finding{file.generic_string(), static_cast<int>(i + 1), trim(lines[i]),
                                   folder + "/ may not include " + target + "/"});
      }
    }
  }
  return findings;
}

std::vector<Finding> fixed_temp_paths(const fs::path& root, const std::vector<std::string>& folders) {
  // A string literal (C++, Python or shell quotes) that starts with /tmp, up to its closing quote.
  static const std::regex kTmpLiteral(R"RE((["'])(/tmp(/[^"']*)?)["'])RE");
  // In shell and CMake a path needs no quotes: /tmp after a space, "=" or the line's start.
  static const std::regex kTmpWord(R"RE((^|[\s=(])(/tmp(/[^\s"')]*)?)($|[\s"')]))RE");
  static const std::regex kTempApi(R"(temp_directory_path\s*\(|gettempdir\s*\()");
  std::vector<Finding> findings;
  for (const std::string& folder : folders) {
    for (const fs::path& file : files_under(root, folder)) {
      const std::string name = file.filename().string();
      if (!is_cxx_source(file) && !has_extension(file, {".py", ".sh", ".cmake"}) &&
          name != "CMakeLists.txt") {
        continue;
      }
      if (file.generic_string() == "tests/temp_dir.h") continue;
      const std::vector<std::string> lines = read_lines(root / file);
      for (size_t i = 0; i < lines.size(); ++i) {
        const std::string& line = lines[i];
        if (line.find("fixed-path-ok") != std::string::npos) continue;
        auto add = [&](const std::string& why) {
          findings.push_back(Finding{file.generic_string(), static_cast<int>(i + 1), trim(line), why});
        };
        const bool script = has_extension(file, {".sh", ".cmake"}) || name == "CMakeLists.txt";
        if (script && trim(line).rfind('#', 0) == 0) continue;  // a comment
        std::set<std::string> paths;  // a path matched both quoted and as a word is reported once
        for (const std::regex* pattern : {&kTmpLiteral, &kTmpWord}) {
          if (pattern == &kTmpWord && !script) continue;
          for (auto it = std::sregex_iterator(line.begin(), line.end(), *pattern);
               it != std::sregex_iterator(); ++it) {
            paths.insert((*it)[2].str());
          }
        }
        for (const std::string& path : paths) {
          const bool mkdtemp_template = path.size() >= 6 && path.compare(path.size() - 6, 6, "XXXXXX") == 0;
          if (!mkdtemp_template) add("fixed temporary path " + path + " (use tests/temp_dir.h)");
        }
        if (std::regex_search(line, kTempApi))
          add("a name in the shared temporary folder (use tests/temp_dir.h)");
      }
    }
  }
  return findings;
}

namespace {

// One file-local definition: where, and for an alias what it names (empty for anything else).
struct LocalName {
  std::string file;
  int line = 0;
  std::string text;
  std::string alias_of;
};

// The name a line at namespace scope defines: a class, struct, union or enum; an alias; or the declarator of
// a function or variable (the identifier before the first "(", "=", "{", "[" or ";", not after "::": that
// is a member's definition). "" for anything else (templates' heads, comments, closing braces).
std::string defined_name(const std::string& line, std::string* alias_of) {
  static const std::regex kType(R"(^(?:class|struct|union|enum(?:\s+class)?)\s+(\w+))");
  static const std::regex kAlias(R"(^using\s+(\w+)\s*=\s*(.*?)\s*;)");
  static const std::regex kDeclarator(R"(^[^(={\[;]*?(::)?\b([A-Za-z_]\w*)\s*[(={\[;])");
  if (line.empty() || std::isspace(static_cast<unsigned char>(line[0])) || line[0] == '}' || line[0] == '#' ||
      line[0] == '/' || line.rfind("template", 0) == 0 || line.rfind("namespace", 0) == 0 ||
      line.rfind("using namespace", 0) == 0 || line.rfind("extern", 0) == 0) {
    return "";
  }
  std::smatch m;
  if (std::regex_search(line, m, kAlias)) {
    *alias_of = m[2].str();
    return m[1].str();
  }
  if (std::regex_search(line, m, kType)) return m[1].str();
  if (!std::regex_search(line, m, kDeclarator) || m[1].matched) return "";
  const std::string name = m[2].str();
  return name == "operator" ? "" : name;
}

}  // namespace

std::vector<Finding> unity_name_clashes(const fs::path& root, const std::vector<std::string>& folders) {
  std::vector<Finding> findings;
  for (const std::string& folder : folders) {
    std::map<std::string, std::vector<LocalName>> names;  // name -> its definitions, files in sorted order
    for (const fs::path& file : files_under(root, folder)) {
      if (!has_extension(file, {".cpp", ".cc"})) continue;
      const std::vector<std::string> lines = read_lines(root / file);
      bool anonymous = false;
      std::set<std::string> seen;  // a name counts once per file (a declaration, then its definition)
      for (size_t i = 0; i < lines.size(); ++i) {
        const std::string& line = lines[i];
        if (line == "namespace {") {
          anonymous = true;
          continue;
        }
        if (line == "}  // namespace") {
          anonymous = false;
          continue;
        }
        std::string alias_of;
        const std::string name = defined_name(line, &alias_of);
        if (name.empty()) continue;
        const bool local = anonymous || line.rfind("static ", 0) == 0 || !alias_of.empty();
        if (!local || !seen.insert(name).second) continue;
        names[name].push_back(
            LocalName{file.generic_string(), static_cast<int>(i + 1), trim(line), alias_of});
      }
    }
    for (const auto& [name, defs] : names) {
      for (size_t d = 1; d < defs.size(); ++d) {
        const LocalName& first = defs.front();
        const bool alias = !first.alias_of.empty() || !defs[d].alias_of.empty();
        if (alias && defs[d].alias_of == first.alias_of) continue;  // the same alias twice is one
        findings.push_back(Finding{defs[d].file, defs[d].line, defs[d].text,
                                   name + " is also defined file-locally in " + first.file + ":" +
                                       std::to_string(first.line) +
                                       " (one unity batch may hold both: give it its file's name)"});
      }
    }
  }
  return findings;
}

}  // namespace crl::test
