#pragma once
// `coding_repo`: a deterministic simulated software repository with one injected bug (project.h). The agent
// works through one-line commands and is graded by the project's hidden tests.
//
// Commands (one per turn; the first non-empty line of the action):
//   ls                      every file with its line count
//   cat FILE [START END]    numbered lines, at most `page_lines` per call
//   grep PATTERN            literal substring search over every file: FILE:LINE: text
//   edit FILE LINE NEW_TEXT replaces line LINE of a source file with NEW_TEXT (kept verbatim, indentation
//                           included); tests/ and README.md are read-only
//   run_tests               runs the visible tests: one PASSED / FAILED line per test and a count
//   submit                  runs the hidden tests; reward 1 only if all pass; ends the episode
// Anything else is answered "ERROR: invalid command ..." and counted; the episode is truncated after
// `max_invalid` invalid commands or `max_turns` turns (reward 0).
//
// The immutable part (CodingRepoConfig, EnvSpec) is shared; the per-episode state is the project's files.
// Budget: observations are hundreds to thousands of bytes, so under the documented coding budget
// (coding_budget(): C = 4096, T_comp = 1024 byte tokens) a solving episode compacts two or three times.
#include <map>
#include <string>
#include <vector>

#include "engine/budget.h"
#include "envs/coding_repo/project.h"
#include "envs/env.h"

namespace crl {

struct CodingRepoConfig {
  std::string source = "generated";  // "generated" (from the task id) | "data" (data_dir/<split>.jsonl)
  std::string data_dir = "data/coding_repo";
  int page_lines = 40;
  int max_turns = 64;
  int max_invalid = 8;
  int grep_max = 30;
  size_t max_observation_bytes = 4096;
};

// The budget this environment is documented and tested with (spec 1.1 guards hold).
Budget coding_budget();

class CodingRepo final : public Env {
 public:
  explicit CodingRepo(CodingRepoConfig config);
  const EnvSpec& spec() const override { return spec_; }
  const coding::Project& project() const { return project_; }
  // The current text of a file (after edits); throws crl::Error for an unknown path.
  std::string file_text(const std::string& path) const;

  static std::vector<ParamSpec> param_specs();
  static CodingRepoConfig config_from(const Params& params);

 protected:
  Start do_reset(const Task& task, Rng& rng) override;
  StepResult do_step(const Action& action) override;

 private:
  std::string run_command(const std::string& line, StepResult& result);
  std::string cmd_ls() const;
  std::string cmd_cat(const std::vector<std::string>& args) const;
  std::string cmd_grep(const std::string& pattern) const;
  std::string cmd_edit(const std::string& rest);
  std::string cmd_run_tests() const;
  coding::Project load(const Task& task);

  CodingRepoConfig config_;
  EnvSpec spec_;
  std::map<std::string, std::vector<coding::Project>> data_cache_;  // split -> projects (source = data)
  coding::Project project_;
  std::map<std::string, std::vector<std::string>> files_;  // path -> lines
  int invalid_ = 0;
};

}  // namespace crl
