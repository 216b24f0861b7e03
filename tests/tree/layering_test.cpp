// The layering of DESIGN.md holds in the sources: an environment knows no server, wire/ knows neither server/
// nor envs/, engine/ depends on nothing of ours. The scanner is shown to catch a seeded violation on a small
// fake tree, so that a clean result on the real tree means something.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/temp_dir.h"
#include "tests/tree/source_scan.h"

namespace crl::test {
namespace {
namespace fs = std::filesystem;

TEST(Layering, TheSourcesFollowTheDependencyTable) {
  const std::vector<Finding> findings = layering_violations(CRL_SOURCE_DIR, design_layering());
  EXPECT_TRUE(findings.empty()) << describe(findings);
}

TEST(Layering, TheTableSaysWhatDesignMdSays) {
  const LayeringRules rules = design_layering();
  EXPECT_EQ(rules.at("envs").count("server"), 0u);
  EXPECT_EQ(rules.at("wire").count("server"), 0u);
  EXPECT_EQ(rules.at("wire").count("envs"), 0u);
  EXPECT_EQ(rules.at("server").count("envs"), 1u);
  EXPECT_EQ(rules.at("policies").count("envs"), 1u);  // the README's stated deviation
  for (const char* folder : {"envs", "policies", "learners", "server", "wire"}) {
    EXPECT_EQ(rules.at("engine").count(folder), 0u) << folder;
  }
}

// A fake tree with one clean include of each allowed kind and one seeded violation per rule.
TEST(Layering, SeededViolationsAreFound) {
  const TempDir root;
  for (const char* folder : {"engine", "envs/remote", "wire", "server", "policies", "learners", "proto"}) {
    fs::create_directories(root.path() / folder);
  }
  root.write("engine/ok.h",
             "#pragma once\n#include <vector>\n#include \"engine/rng.h\"\n#include \"proto/x.pb.h\"\n");
  root.write("engine/rng.h", "#pragma once\n");
  root.write("wire/codec.h", "#include \"engine/rng.h\"\n");
  root.write("envs/remote/remote_env.cpp",
             "#include \"envs/remote/remote_env.h\"\n#include \"wire/codec.h\"\n#include <boost/asio.hpp>\n");
  root.write("server/service.cpp", "#include \"envs/remote/remote_env.h\"\n#include \"wire/codec.h\"\n");
  root.write("policies/p.cpp", "#include \"envs/remote/remote_env.h\"\n#include \"learners/l.h\"\n");
  root.write("learners/l.h", "#pragma once\n");
  EXPECT_TRUE(layering_violations(root.path(), design_layering()).empty())
      << describe(layering_violations(root.path(), design_layering()));

  // The seeds: each broken rule of the brief, in the spellings a compiler would accept.
  root.write("envs/remote/bad.cpp", "#include \"server/service.h\"\n");
  root.write("envs/remote/relative.cpp", "  #  include \"../../server/service.h\"\n");
  root.write("wire/bad.h", "#include <server/service.h>\n#include \"envs/remote/remote_env.h\"\n");
  root.write("engine/bad.cu", "#include \"policies/p.h\"\n#include \"learners/l.h\"\n");
  root.write("engine/bad.cpp", "#include \"envs/env.h\"\n#include \"server/service.h\"\n");
  root.write("learners/bad.cpp", "#include \"server/service.h\"\n");
  const std::vector<Finding> found = layering_violations(root.path(), design_layering());
  std::vector<std::string> where;
  for (const Finding& f : found) where.push_back(f.file + ":" + std::to_string(f.line) + " " + f.why);
  EXPECT_EQ(where, (std::vector<std::string>{
                       "engine/bad.cpp:1 engine/ may not include envs/",
                       "engine/bad.cpp:2 engine/ may not include server/",
                       "engine/bad.cu:1 engine/ may not include policies/",
                       "engine/bad.cu:2 engine/ may not include learners/",
                       "envs/remote/bad.cpp:1 envs/ may not include server/",
                       "envs/remote/relative.cpp:1 envs/ may not include server/",
                       "learners/bad.cpp:1 learners/ may not include server/",
                       "wire/bad.h:1 wire/ may not include server/",
                       "wire/bad.h:2 wire/ may not include envs/",
                   }))
      << describe(found);
}

}  // namespace
}  // namespace crl::test
