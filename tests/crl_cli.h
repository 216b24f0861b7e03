#pragma once
// Runs the `crl` command line in-process (cli::run_cli, exactly as main() does) and captures what it prints,
// for the tests of the subcommands.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/command.h"

namespace crl::test {

struct CliResult {
  int code;
  std::string out, err;
};

inline CliResult crl(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = cli::run_cli(args);
  std::fflush(stdout);  // what the command printed, before the capture ends
  return CliResult{code, ::testing::internal::GetCapturedStdout(), ::testing::internal::GetCapturedStderr()};
}

}  // namespace crl::test
