#pragma once
// Checks over the source tree as text, so that rules a compiler cannot see fail a test instead of a review:
//  * layering: which top-level folders a folder's sources may include (DESIGN.md's dependency table);
//  * fixed temporary paths in tests: two suites running at once must never share a folder;
//  * file-local names that two files of one library share (a unity build compiles them together).
// Each takes the tree's root, so that a test can run them on a small fake tree with seeded violations.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace crl::test {

// One broken rule: where, the offending line, and what the rule says.
struct Finding {
  std::string file;  // relative to the root
  int line = 0;      // 1-based
  std::string text;  // the line, trimmed
  std::string why;
};

// "file:line: why: text", one finding a line (for test failure messages).
std::string describe(const std::vector<Finding>& findings);

// Folder -> the top-level folders its sources may include (itself included). Folders not listed (cli/,
// scenarios/, bench/, tests/, ...) may include anything.
using LayeringRules = std::map<std::string, std::set<std::string>>;
LayeringRules design_layering();

// Every #include in C++/CUDA sources under the rules' folders whose target lies in a top-level folder of the
// tree that the including folder may not depend on. Includes are resolved like the compiler: relative to
// the including file when that file exists, else relative to the root; system headers (<...> not naming a
// folder of the tree) are ignored.
std::vector<Finding> layering_violations(const std::filesystem::path& root, const LayeringRules& rules);

// Fixed temporary paths in test sources (C++, Python, shell, CMake) under `folders` of the root: a literal
// starting with /tmp (a mkdtemp template ending in XXXXXX is unique and allowed), or a name chosen inside
// the shared temporary folder (std::filesystem's or Python's tempfile's). tests/temp_dir.h, the one place
// that asks for the temporary folder, is exempt, and so is a line marked "fixed-path-ok" (a path that only
// exists inside a sandbox's private mount namespace, say).
std::vector<Finding> fixed_temp_paths(const std::filesystem::path& root,
                                      const std::vector<std::string>& folders);

// Names that two source files of one library both define file-locally, which a unity build (CMakeLists.txt,
// CRL_UNITY_BUILD) turns into one translation unit's redefinition or, for overloads, a silent choice between
// the two files' functions, depending on which files share a batch. A file-local name is one defined at the
// start of a line in a .cpp file: inside an anonymous namespace (`namespace {` ... `}  // namespace`, the
// project's clang-format style), or marked `static`; and an alias (`using X = ...;`) anywhere at namespace
// scope, which clashes only when two files alias different things. `folders` are the libraries (top-level
// folders, each one target); one finding per file after the first that defines a name.
std::vector<Finding> unity_name_clashes(const std::filesystem::path& root,
                                        const std::vector<std::string>& folders);

}  // namespace crl::test
