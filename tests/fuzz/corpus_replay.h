#pragma once
// Replays a fuzz target's seed corpus (tests/fuzz/corpus/<target>) through the target's function in the
// normal test build, so the target's properties are checked in CI without libFuzzer.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace crl::testing {

// Calls `target(data, size)` on every file of the corpus; each call must return 0. Returns the file count.
template <typename Target>
size_t replay_corpus(const std::string& target_name, Target target) {
  const std::filesystem::path dir = std::filesystem::path(CRL_SOURCE_DIR) / "tests/fuzz/corpus" / target_name;
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    const std::string data = bytes.str();
    EXPECT_EQ(target(reinterpret_cast<const uint8_t*>(data.data()), data.size()), 0) << entry.path();
    ++files;
  }
  return files;
}

}  // namespace crl::testing
