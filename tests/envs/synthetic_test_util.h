#pragma once
// Helpers shared by the synthetic-suite tests: a fresh temporary folder and the committed data folder.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace crl::envs::synthetic::testing {

// A fresh, empty folder named after the running test, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ =
        std::filesystem::temp_directory_path() / ("crl_synthetic_" + std::string(info->test_suite_name()) +
                                                  "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string committed_dir() {
  return std::string(CRL_SOURCE_DIR) + "/data/synthetic";
}

}  // namespace crl::envs::synthetic::testing
