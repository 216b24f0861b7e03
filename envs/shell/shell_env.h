#pragma once
// `shell`: Harbor-style task folders run with /bin/sh in a sandbox (envs/shell/sandbox.h).
//
// A task is a folder `<tasks_dir>/<task id>/` holding instruction.md (the user prompt), task.toml
// ([agent] timeout_sec: the episode's total command time; [verifier] timeout_sec), tests/test.sh (the
// verifier: it writes a reward in [0, 1] to $LOGS_DIR/verifier/reward.txt, or {"reward": x} to reward.json)
// and optionally solution/ (never shown to the agent; solve.sh is what the sample tests replay).
//
// Episode: reset() copies the task folder (without tests/ and solution/) into a fresh scratch workspace under
// `scratch_root` (scratch.h: a size-limited tmpfs when we are root), and the tests into a hidden folder (so
// deleting the task folder mid-episode changes nothing). Each action is a shell script run in the workspace
// (see sandbox.h for the layers, limits and output truncation); the observation is its output and
// "[exit code N]" or why it was killed. `submit` (or `task_complete`) runs the verifier behind a trust
// boundary (every agent process killed first, a uid the agent never had, a log folder made for it, the reward
// read without following links) and ends the episode with its reward. Failures never hang the engine: a
// timed-out or crashed command is an observation; the agent's time budget, the turn limit, too many invalid
// (empty) actions, or a workspace that vanished truncate the episode with a reason; a verifier that times
// out or writes no reward gives reward 0 with a reason. The scratch folder is removed when the episode ends
// (and at the next reset or destruction). README.md has the table of what holds where.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "envs/env.h"
#include "envs/shell/sandbox.h"

namespace crl {

struct ShellConfig {
  std::string tasks_dir = "data/shell_tasks";
  std::string scratch_root = "/tmp/crl-shell";
  double command_timeout_sec = 30;  // per command, also capped by the task's agent timeout left
  int max_turns = 32;
  int max_invalid = 8;
  int64_t disk_bytes = int64_t{512} << 20;  // the scratch tmpfs (root only)
  shell::SandboxLimits limits;
};

// What task.toml says (a small subset of TOML: [section] and key = number | "string" | bool lines).
struct ShellTaskSpec {
  std::string instruction;
  double agent_timeout_sec = 600;
  double verifier_timeout_sec = 600;
};
// Throws crl::Error naming the file, line and field for a malformed or missing file.
ShellTaskSpec load_shell_task(const std::string& folder);

class ShellEnv final : public Env {
 public:
  explicit ShellEnv(ShellConfig config);
  ~ShellEnv() override;
  const EnvSpec& spec() const override { return spec_; }
  // The scratch folder of the running episode ("" when none).
  const std::string& scratch() const { return scratch_; }
  // The task folders (those holding task.toml) of tasks_dir, in sorted order.
  std::vector<std::string> task_names() const;
  std::optional<TaskList> task_list() const override;
  bool has_task(const std::string& id) const override;

  static std::vector<ParamSpec> param_specs();
  static ShellConfig config_from(const Params& params);

 protected:
  Start do_reset(const Task& task, Rng& rng) override;
  StepResult do_step(const Action& action) override;

 private:
  StepResult verify();
  void cleanup();
  shell::SandboxPaths paths() const;

  ShellConfig config_;
  EnvSpec spec_;
  ShellTaskSpec task_;
  std::string scratch_;
  double agent_time_used_ms_ = 0;
  int invalid_ = 0;
  int verifier_uid_ = 0;
};

}  // namespace crl
