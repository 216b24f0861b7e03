// cuBLAS is loaded when a CUDA back-end first uses it, never at a process's start (engine/cuda/
// cublas_library.h): no device is needed to check either, only the toolkit the build found.
#include "engine/cuda/cublas_library.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <string>

namespace crl::cuda {
namespace {

// Whether a library whose file name holds `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

// ctest runs each test in its own process, where nothing has used cuBLAS before this test; a process that
// links libcublas has it (and libcublasLt, 0.37 s and 218 MB) mapped before main.
TEST(CublasLibrary, IsNotMappedUntilFirstUsedAndThenHasItsFunctions) {
  if (!cublas_loaded()) {
    EXPECT_FALSE(mapped("libcublas"))
        << "libcublas is linked: every process of this binary loads it at start";
  }
  const CublasLibrary& library = cublas();
  EXPECT_TRUE(cublas_loaded());
  EXPECT_TRUE(mapped("libcublas"));
  EXPECT_NE(library.create, nullptr);
  EXPECT_NE(library.destroy, nullptr);
  EXPECT_NE(library.set_math_mode, nullptr);
  EXPECT_NE(library.sgemm, nullptr);
}

TEST(CublasLibrary, AFileNamedInCrlCublasThatIsNotALibraryIsAnErrorNamingIt) {
  if (cublas_loaded()) GTEST_SKIP() << "cuBLAS was loaded by an earlier test of this process";
  // CRL_CUBLAS = `value`: cublas() throws naming `field`, its message holding `text`, and loads nothing.
  const auto refused = [](const char* value, const std::string& field, const std::string& text) {
    ASSERT_EQ(setenv("CRL_CUBLAS", value, 1), 0);
    try {
      cublas();
      ADD_FAILURE() << "expected an error for " << value;
    } catch (const Error& error) {
      EXPECT_EQ(error.field(), field);
      EXPECT_NE(error.message().find(text), std::string::npos) << error.what();
    }
    EXPECT_FALSE(cublas_loaded());
  };
  refused("/nonexistent/libcublas.so.99", "CRL_CUBLAS",
          "\"/nonexistent/libcublas.so.99\" could not be loaded");
  // A library without cuBLAS's functions: named, with the one missing.
  refused("libz.so.1", "libz.so.1", "has no function cublasCreate_v2");
  // Unset, the next call loads the toolkit's.
  ASSERT_EQ(unsetenv("CRL_CUBLAS"), 0);
  EXPECT_NE(cublas().sgemm, nullptr);
  EXPECT_TRUE(cublas_loaded());
}

}  // namespace
}  // namespace crl::cuda
