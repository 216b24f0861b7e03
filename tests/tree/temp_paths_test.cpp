// Issue 14: tests that used fixed temporary folders deleted each other's files when two suites ran at once.
// Every test now takes a unique folder from tests/temp_dir.h; this lint keeps it so (it fails on the sources
// before the fix), and the helper's own contract is checked here. tests/tree/CMakeLists.txt also runs two
// copies of the affected suites at the same time (ctest: concurrent_suites_*).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/temp_dir.h"
#include "tests/tree/source_scan.h"

namespace crl::test {
namespace {
namespace fs = std::filesystem;

// The folders whose files ctest compiles or runs: C++ tests, their CMake, shell and Python tests.
const std::vector<std::string> kTestFolders = {"tests", "clients/python/tests"};

TEST(TempPaths, NoTestUsesAFixedTemporaryPath) {
  const std::vector<Finding> findings = fixed_temp_paths(CRL_SOURCE_DIR, kTestFolders);
  EXPECT_TRUE(findings.empty()) << describe(findings);
}

TEST(TempPaths, SeededFixedPathsAreFound) {
  const TempDir root;
  fs::create_directories(root.path() / "tests" / "cli");
  fs::create_directories(root.path() / "clients" / "python" / "tests");
  // Spelled in pieces so that this file does not trip the lint itself.
  const std::string tmp = std::string("/t") + "mp";
  root.write("tests/cli/a_test.cpp",
             "const auto dir = std::filesystem::temp_directory"
             "_path() / \"crl_x\";\n"
             "std::string p = \"" +
                 tmp +
                 "/crl_cli_test\";\n"
                 "std::string t = \"" +
                 tmp +
                 "/crl-x-XXXXXX\";  // a mkdtemp template\n"
                 "std::string s = \"" +
                 tmp + "/app\";  // fixed-path-ok: inside the sandbox\n");
  root.write("tests/cli/run.sh", "out=" + tmp + "/x\nrm -rf '" + tmp + "/crl_run'\n");
  root.write("tests/CMakeLists.txt", "add_test(NAME x COMMAND x --out \"" + tmp + "\")\n");
  root.write("clients/python/tests/test_x.py",
             "import tempfile\nd = os.path.join(tempfile.gettemp"
             "dir(), 'crl')\nt = tempfile.mkdtemp()\n");
  root.write("tests/cli/data.txt", "\"" + tmp + "/not a source\"\n");
  const std::vector<Finding> found = fixed_temp_paths(root.path(), kTestFolders);
  std::vector<std::string> where;
  for (const Finding& f : found) where.push_back(f.file + ":" + std::to_string(f.line));
  EXPECT_EQ(where, (std::vector<std::string>{"tests/CMakeLists.txt:1", "tests/cli/a_test.cpp:1",
                                             "tests/cli/a_test.cpp:2", "tests/cli/run.sh:1",
                                             "tests/cli/run.sh:2", "clients/python/tests/test_x.py:2"}))
      << describe(found);
}

std::string read_back(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(TempDir, IsUniqueEmptyAndRemoved) {
  fs::path first, second;
  {
    const TempDir a, b;
    first = a.path();
    second = b.path();
    EXPECT_NE(first, second);
    EXPECT_TRUE(fs::is_directory(first));
    EXPECT_TRUE(fs::is_empty(first));
    EXPECT_NE(first.filename().string().find("crl_TempDir_IsUniqueEmptyAndRemoved_"), std::string::npos)
        << first;
    EXPECT_EQ(read_back(a.write("f.txt", "bytes")), "bytes");
    fs::create_directories(a.path() / "deep" / "er");
    a.write("deep/er/g.txt", "more");
  }
  EXPECT_FALSE(fs::exists(first));
  EXPECT_FALSE(fs::exists(second));
}

// Runs `body` with an environment variable set, then restores it.
template <typename Body>
void with_env(const char* name, const std::string& value, Body body) {
  const char* old = std::getenv(name);
  const std::string saved = old == nullptr ? "" : old;
  ::setenv(name, value.c_str(), 1);
  body();
  if (old == nullptr) {
    ::unsetenv(name);
  } else {
    ::setenv(name, saved.c_str(), 1);
  }
}

TEST(TempDir, LivesUnderTmpdirAndIsKeptOnRequest) {
  const TempDir outer("outer");
  fs::path inner_path;
  with_env("TMPDIR", outer.str(), [&] {
    with_env("CRL_KEEP_TEST_TMP", "1", [&] {
      const TempDir inner("inner");
      inner_path = inner.path();
      EXPECT_EQ(inner_path.parent_path(), outer.path());
      EXPECT_EQ(inner_path.filename().string().rfind("crl_inner_", 0), 0u) << inner_path;
    });
  });
  EXPECT_TRUE(fs::is_directory(inner_path)) << "kept";
  const TempDir odd("a/b c");  // a label is never a path
  EXPECT_EQ(odd.path().parent_path(), outer.path().parent_path());
}

}  // namespace
}  // namespace crl::test
