// Every library compiles in unity batches (CMakeLists.txt, CRL_UNITY_BUILD), so two files of one library
// that define the same file-local name build today only while they fall in different batches: adding a file
// shifts the batches and breaks someone else's files, or, for overloads, makes one file call the other's
// function. The scanner is shown to catch each kind of clash on a small fake tree, so that a clean result on
// the real tree means something.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/temp_dir.h"
#include "tests/tree/source_scan.h"

namespace crl::test {
namespace {

// The folders that are one library target each (their CMakeLists.txt add to one target). proto/'s files are
// generated and compile alone; bench/ and tests/ hold several executables each.
const std::vector<std::string> kLibraries = {"cli",       "engine", "envs", "learners", "policies",
                                             "scenarios", "server", "ui",   "wire"};

TEST(UnityNames, NoTwoFilesOfALibraryShareAFileLocalName) {
  const std::vector<Finding> found = unity_name_clashes(CRL_SOURCE_DIR, kLibraries);
  EXPECT_TRUE(found.empty()) << describe(found);
}

TEST(UnityNames, SeededClashesAreFound) {
  const TempDir root;
  root.write("server/a.cpp",
             "#include \"server/a.h\"\n"
             "namespace crl {\n"
             "using json = nlohmann::json;\n"
             "namespace {\n"
             "struct Helper;\n"
             "constexpr int kLimit = 3;\n"
             "std::string render(const Helper& h) {\n"
             "  int inner(int);\n"  // indented: not at namespace scope
             "}\n"
             "const Registrar kRegistrar({\"a\"});\n"
             "}  // namespace\n"
             "int Widget::render(int x) { return x; }\n"  // a member: never file-local
             "std::string exported(int x);\n"             // external linkage: the linker's business
             "}  // namespace crl\n");
  root.write("server/b/b.cpp",
             "namespace crl {\n"
             "using json = nlohmann::json;\n"  // the same alias again: allowed
             "namespace {\n"
             "class Helper final : public Base {};\n"
             "int render(int x) { return x; }\n"  // an overload of a.cpp's render: a clash too
             "int inner(int);\n"
             "}  // namespace\n"
             "static const char* kLimit = \"x\";\n"
             "std::string exported(double x);\n"
             "}  // namespace crl\n");
  root.write("server/c.cpp",
             "namespace crl {\n"
             "using json = nlohmann::ordered_json;\n"  // a different alias of the same name
             "namespace {\n"
             "const Registrar kRegistrar({\"c\"});\n"
             "}  // namespace\n"
             "}  // namespace crl\n");
  root.write("server/a.h", "namespace crl { namespace { int render(int); } }\n");  // headers are not scanned
  root.write("engine/d.cpp",
             "namespace {\nint render(int x) { return x; }\n}  // namespace\n");  // another library
  const std::vector<Finding> found = unity_name_clashes(root.path(), {"engine", "server"});
  std::vector<std::string> where;
  for (const Finding& f : found) where.push_back(f.file + ":" + std::to_string(f.line) + " " + f.text);
  EXPECT_EQ(where, (std::vector<std::string>{
                       // in the order of the names
                       "server/b/b.cpp:4 class Helper final : public Base {};",
                       "server/c.cpp:2 using json = nlohmann::ordered_json;",
                       "server/b/b.cpp:8 static const char* kLimit = \"x\";",
                       "server/c.cpp:4 const Registrar kRegistrar({\"c\"});",
                       "server/b/b.cpp:5 int render(int x) { return x; }",
                   }))
      << describe(found);
  ASSERT_FALSE(found.empty());
  EXPECT_NE(found.front().why.find("server/a.cpp:5"), std::string::npos) << found.front().why;
}

}  // namespace
}  // namespace crl::test
