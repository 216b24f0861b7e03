// Replays the scenario parser's fuzz seed corpus (tests/fuzz/corpus/scenario_parser) through the fuzz
// target's function in the normal build, so the target's properties are checked in CI without libFuzzer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace crl::scenarios {
int fuzz_scenario_parser(const uint8_t* data, size_t size);
namespace {

TEST(ScenarioFuzzCorpus, SeedCorpusReplays) {
  const std::filesystem::path dir =
      std::filesystem::path(CRL_SOURCE_DIR) / "tests/fuzz/corpus/scenario_parser";
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    const std::string data = bytes.str();
    EXPECT_EQ(fuzz_scenario_parser(reinterpret_cast<const uint8_t*>(data.data()), data.size()), 0)
        << entry.path();
    ++files;
  }
  EXPECT_GE(files, 10u);
}

}  // namespace
}  // namespace crl::scenarios
