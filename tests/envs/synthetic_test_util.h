#pragma once
// Helpers shared by the synthetic-suite tests: a fresh temporary folder and the committed data folder.
#include <string>

#include "tests/temp_dir.h"

namespace crl::envs::synthetic::testing {

// A fresh, empty, unique folder named after the running test, removed when the object goes away.
using TempDir = ::crl::test::TempDir;

inline std::string committed_dir() {
  return std::string(CRL_SOURCE_DIR) + "/data/synthetic";
}

}  // namespace crl::envs::synthetic::testing
