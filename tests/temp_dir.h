#pragma once
// The one way a test gets a folder on disk: a fresh, empty, unique folder that is removed when the object
// goes away. Two suites running at once (two checkouts on one machine, CI beside a development run, ctest -j)
// never share a folder, because the name comes from mkdtemp, not from the test's name or a fixed path.
//
// Where: under $TMPDIR when it is set, else the system's temporary folder (std::filesystem picks /tmp).
// Name: crl_<label>_XXXXXX, the label defaulting to the running test's suite and name, so that a kept folder
// says which test made it. Keep: with CRL_KEEP_TEST_TMP=1 in the environment the folder stays and its path
// is printed on stderr (to look at a failing test's files).
//
// tests/tree/hygiene_test.cpp fails on any fixed temporary path in the test sources; use this instead.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace crl::test {

class TempDir {
 public:
  // label: a readable part of the folder's name; empty = the running test's "Suite_Name".
  explicit TempDir(std::string_view label = {}) {
    std::string name(label);
    if (name.empty()) name = running_test_name();
    for (char& c : name) {
      const bool plain =
          (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
      if (!plain) c = '_';
    }
    std::string pattern = (base() / ("crl_" + name + "_XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot make a temporary folder from " + pattern);
    }
    path_ = pattern;
  }
  ~TempDir() {
    const char* keep = std::getenv("CRL_KEEP_TEST_TMP");
    if (keep != nullptr && std::string_view(keep) == "1") {
      std::fprintf(stderr, "kept %s\n", path_.c_str());
      return;
    }
    std::error_code ignored;  // never throw from a destructor; a leftover folder is not a test failure
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // The path of `name` inside the folder (nothing is created).
  std::string file(std::string_view name) const { return (path_ / name).string(); }
  // Writes `content` to `name` inside the folder (its folders created: "a/b.cpp") and returns its path.
  std::string write(std::string_view name, std::string_view content) const {
    const std::string target = file(name);
    std::filesystem::create_directories(std::filesystem::path(target).parent_path());
    std::ofstream out(target, std::ios::binary);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out.flush()) throw std::runtime_error("cannot write " + target);
    return target;
  }

 private:
  static std::filesystem::path base() {
    const char* tmpdir = std::getenv("TMPDIR");
    if (tmpdir != nullptr && *tmpdir != '\0') return tmpdir;
    return std::filesystem::temp_directory_path();
  }
  static std::string running_test_name() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    if (info == nullptr) return "test";
    return std::string(info->test_suite_name()) + "_" + info->name();
  }

  std::filesystem::path path_;
};

}  // namespace crl::test
