#include "envs/shell/shell_env.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <sstream>

#include "engine/error.h"
#include "engine/file_io.h"
#include "envs/command_env.h"
#include "envs/shell/scratch.h"

namespace crl {
namespace fs = std::filesystem;
namespace {

std::string format_seconds(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

const char* kShellSystemPrompt =
    "You work in a Linux shell on the task below. Each reply is a shell script, run with /bin/sh in the "
    "task's "
    "workspace (the current directory); its output (long outputs keep their head and tail) and exit code "
    "come "
    "back. There is no network, and resources are limited. Reply `submit` when the task is done: hidden "
    "tests then decide the reward.";

}  // namespace

ShellTaskSpec load_shell_task(const std::string& folder) {
  ShellTaskSpec spec;
  if (!fs::is_directory(folder)) throw Error(folder, "", "no such task folder");
  spec.instruction = read_file(folder + "/instruction.md");
  if (!fs::exists(folder + "/tests/test.sh"))
    throw Error(folder + "/tests/test.sh", "", "missing verifier script");
  const std::string toml_path = folder + "/task.toml";
  std::istringstream in(read_file(toml_path));
  std::string line, section;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = toml_path + ":" + std::to_string(number);
    line = trim_space(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']') throw Error(where, "", "expected [section], found " + quote(line));
      section = trim_space(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw Error(where, "", "expected key = value, found " + quote(line));
    const std::string key = trim_space(line.substr(0, eq)), value = trim_space(line.substr(eq + 1));
    if (key == "timeout_sec" && (section == "agent" || section == "verifier")) {
      double seconds = 0;
      try {
        size_t used = 0;
        seconds = std::stod(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        throw Error(where, section + ".timeout_sec", "value " + quote(value) + " is not a number");
      }
      if (seconds <= 0) throw Error(where, section + ".timeout_sec", "value " + value + " must be > 0");
      (section == "agent" ? spec.agent_timeout_sec : spec.verifier_timeout_sec) = seconds;
    }
    // Other keys (metadata, environment resources) are accepted and ignored: limits come from parameters.
  }
  return spec;
}

ShellEnv::ShellEnv(ShellConfig config) : config_(std::move(config)) {
  // Each instance gets its own unprivileged uid/gid (when we are root): RLIMIT_NPROC counts the processes of
  // a uid, so episodes running side by side (threads, processes) must not share one, or a fork bomb in one
  // starves the others. Ids in [200000, 260000) need no passwd entry.
  static std::atomic<uint64_t> instances{0};
  const uint64_t mix = static_cast<uint64_t>(getpid()) * 7919u + instances.fetch_add(1) * 104729u;
  config_.limits.uid = config_.limits.gid = static_cast<int>(200000 + mix % 60000);
  // The verifier's uid: one the agent never had (item 9), in [260000, 320000).
  verifier_uid_ = config_.limits.uid + 60000;
  spec_.name = "shell";
  spec_.description = "Harbor-style task folders run with /bin/sh in a sandbox";
  spec_.params = param_specs();
  spec_.has_text = true;
  // Scripts need more than 64 tokens a turn, and one command's output may be output_bytes long (byte tokens).
  spec_.text_budget = Budget{16384, 4096, 2, 1024, 1024, 6};
  // Output head + tail + marker + the status line, or the instruction.
  spec_.max_observation_bytes = config_.limits.output_bytes + 512;
}

ShellEnv::~ShellEnv() {
  cleanup();
}

std::vector<ParamSpec> ShellEnv::param_specs() {
  return {
      // Host paths, resource limits and namespaces are server configuration only (ParamSpec::server_only).
      {"tasks_dir", ParamType::kString, "data/shell_tasks", "folder of task folders (the task id names one)",
       true},
      {"scratch_root", ParamType::kString, "/tmp/crl-shell", "where per-episode scratch folders are made",
       true},
      {"command_timeout_sec", ParamType::kDouble, "30", "wall-clock limit of one command", false,
       ParamUnit::kSeconds},
      {"max_turns", ParamType::kInt, "32", "turn limit (then truncated)"},
      {"max_invalid", ParamType::kInt, "8", "empty actions before truncation"},
      {"cpu_seconds", ParamType::kInt, "20", "RLIMIT_CPU of a command", true},
      {"memory_mb", ParamType::kInt, "1024",
       "memory of a command: the cgroup limit of all its processes together, and RLIMIT_AS of each", true},
      {"file_mb", ParamType::kInt, "64", "RLIMIT_FSIZE: largest file a command may write", true},
      {"processes", ParamType::kInt, "64",
       "processes of a command: the cgroup pids.max, and RLIMIT_NPROC of the sandbox uid", true},
      {"output_bytes", ParamType::kInt, "8192", "output kept per command (head + tail)"},
      {"disk_mb", ParamType::kInt, "512", "size of the episode's scratch tmpfs (root only): all it may write",
       true},
      {"namespaces", ParamType::kBool, "true", "use network/PID/mount namespaces where the kernel allows",
       true},
  };
}

ShellConfig ShellEnv::config_from(const Params& params) {
  const std::string where = "environment \"shell\"";
  ShellConfig c;
  c.tasks_dir = params.get_string("tasks_dir");
  c.scratch_root = params.get_string("scratch_root");
  if (c.scratch_root.empty() || c.scratch_root[0] != '/') {
    throw Error(where, "scratch_root", "value " + quote(c.scratch_root) + " must be an absolute path");
  }
  c.command_timeout_sec = params.get_double("command_timeout_sec");
  if (!(c.command_timeout_sec > 0)) throw Error(where, "command_timeout_sec", "must be > 0");
  const auto at_least = [&](const char* name, int64_t lo) { return params.get_int_at_least(name, lo); };
  c.max_turns = static_cast<int>(at_least("max_turns", 1));
  c.max_invalid = static_cast<int>(at_least("max_invalid", 1));
  c.limits.cpu_seconds = at_least("cpu_seconds", 1);
  c.limits.memory_bytes = at_least("memory_mb", 16) << 20;
  c.limits.file_bytes = at_least("file_mb", 1) << 20;
  c.limits.processes = at_least("processes", 4);
  c.limits.output_bytes = static_cast<size_t>(at_least("output_bytes", 256));
  c.limits.use_namespaces = params.get_bool("namespaces");
  c.disk_bytes = at_least("disk_mb", 1) << 20;
  return c;
}

std::vector<std::string> ShellEnv::task_names() const {
  std::vector<std::string> names;
  std::error_code list_error;
  for (const auto& entry : fs::directory_iterator(config_.tasks_dir, list_error)) {
    if (fs::exists(entry.path() / "task.toml")) names.push_back(entry.path().filename().string());
  }
  // A folder that is not there is named as such (it was "no task folders here", or a count of 0 tasks that
  // `crl run` blamed on --episodes).
  if (list_error) {
    throw Error("param tasks_dir", "tasks_dir",
                "value " + quote(config_.tasks_dir) + " cannot be listed (" + list_error.message() +
                    "); expected a folder of task folders, each with a task.toml");
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<TaskList> ShellEnv::task_list() const {
  return TaskList{"tasks_dir " + quote(config_.tasks_dir), task_names().size()};
}

bool ShellEnv::has_task(const std::string& id) const {
  const std::vector<std::string> names = task_names();
  return std::find(names.begin(), names.end(), id) != names.end();
}

shell::SandboxPaths ShellEnv::paths() const {
  return shell::SandboxPaths{scratch_ + "/app", "", scratch_ + "/logs"};
}

void ShellEnv::cleanup() {
  if (scratch_.empty()) return;
  // Nothing of the episode may outlive it: its processes first (a plain-mode setsid escapee), then the
  // folder.
  shell::kill_uid(config_.limits.uid);
  shell::kill_uid(verifier_uid_);
  shell::remove_scratch(scratch_);
  scratch_.clear();
}

ShellEnv::Start ShellEnv::do_reset(const Task& task, Rng&) {
  cleanup();
  const std::string where = "task " + quote(task.id);
  if (task.id.empty() || task.id[0] == '.' ||
      task.id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos) {
    throw Error(where, "id", "a shell task id is a folder name (letters, digits, . _ -)");
  }
  // An id that names a task folder selects it. Any other id (generic drivers use "t0", "demo-0", ...)
  // selects the index-th task folder in sorted order, like the synthetic suite does: past the end it is an
  // error naming the folder and its size, unless the driver asked to cycle (Task::cycle).
  std::string folder = config_.tasks_dir + "/" + task.id;
  if (!fs::is_directory(folder)) {
    const std::vector<std::string> names = task_names();
    if (names.empty()) throw Error(config_.tasks_dir, "tasks_dir", "no task folders (with task.toml) here");
    if (!task.cycle && task.index >= names.size())
      throw Error(where, "index", task_index_message(task.index, *task_list()));
    folder = config_.tasks_dir + "/" + names[task.index % names.size()];
  }
  task_ = load_shell_task(folder);
  std::error_code ec;
  shell::sweep_stale_scratch_once(config_.scratch_root);
  scratch_ = shell::make_scratch(config_.scratch_root, config_.limits.uid, config_.disk_bytes).path;
  const fs::path app = scratch_ + "/app", tests = scratch_ + "/hidden-tests", logs = scratch_ + "/logs";
  fs::create_directories(app);
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name == "tests" || name == "solution") continue;
    fs::copy(entry.path(), app / name, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
    if (ec) throw Error(folder, "", "cannot copy " + name + ": " + ec.message());
  }
  fs::copy(folder + "/tests", tests, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (ec) throw Error(folder + "/tests", "", "cannot copy the tests: " + ec.message());
  chmod(tests.c_str(), 0700);  // hidden from the agent until the verifier runs
  fs::create_directories(logs / "verifier");
  if (shell::probe_sandbox().root) {
    shell::chown_tree(app, config_.limits.uid, config_.limits.gid);
    shell::chown_tree(logs, config_.limits.uid, config_.limits.gid);
  }
  agent_time_used_ms_ = 0;
  invalid_ = 0;
  Start start;
  start.system.text = kShellSystemPrompt;
  start.user.text = shell::sanitize_utf8(task_.instruction);
  if (start.user.text.size() > spec_.max_observation_bytes) {
    // Keep the head (valid UTF-8: sanitize again after the cut) and say so.
    start.user.text = shell::sanitize_utf8(start.user.text.substr(0, spec_.max_observation_bytes - 64)) +
                      "\n[... instruction truncated ...]";
  }
  return start;
}

// The verifier's trust boundary (item 9): it runs after every process of the agent's uid is dead, as a uid
// the agent never had, with a log folder made now (the agent never owned it or saw it), and the reward is
// read without following links, from a regular file of at most 4 KiB.
StepResult ShellEnv::verify() {
  StepResult result;
  result.terminated = true;
  double reward = 0;
  std::string why;
  const std::string tests = scratch_ + "/hidden-tests", vlogs = scratch_ + "/verifier-logs";
  shell::SandboxLimits limits = config_.limits;
  limits.wall_seconds = task_.verifier_timeout_sec;
  if (!shell::kill_uid(config_.limits.uid)) {
    why = "a process of the agent could not be killed; no verification";
  } else {
    std::error_code ec;
    fs::remove_all(vlogs, ec);  // cannot exist (root made the scratch folder); never trust it
    fs::create_directories(vlogs + "/verifier", ec);
    if (shell::probe_sandbox().root) {
      limits.uid = limits.gid = verifier_uid_;
      shell::chown_tree(scratch_ + "/app", verifier_uid_, verifier_uid_);
      shell::chown_tree(tests, verifier_uid_, verifier_uid_);
      shell::chown_tree(vlogs, verifier_uid_, verifier_uid_);
    }
    chmod(tests.c_str(), 0755);
    shell::SandboxPaths p{scratch_ + "/app", tests, vlogs};
    const shell::SandboxPaths seen = shell::visible_paths(p, limits);
    const shell::SandboxResult run = shell::run_sandboxed("sh \"" + seen.tests + "/test.sh\"", p, limits);
    shell::kill_uid(verifier_uid_);
    if (run.timed_out) {
      why = "verifier timed out after " + format_seconds(limits.wall_seconds) + " s";
    } else {
      std::string txt_why, json_why;
      const auto txt = shell::read_small_file_nofollow(vlogs, "verifier/reward.txt", 4096, &txt_why);
      const auto json = txt ? std::nullopt
                            : shell::read_small_file_nofollow(vlogs, "verifier/reward.json", 4096, &json_why);
      if (txt) {
        try {
          reward = std::stod(trim_space(*txt));
          why = "reward.txt";
        } catch (const std::exception&) {
          why = "reward.txt does not hold a number";
        }
      } else if (json) {
        const size_t at = json->find("\"reward\"");
        const size_t colon = at == std::string::npos ? at : json->find(':', at);
        try {
          reward = colon == std::string::npos ? 0 : std::stod(json->substr(colon + 1));
          why = colon == std::string::npos ? "reward.json has no \"reward\"" : "reward.json";
        } catch (const std::exception&) {
          why = "reward.json does not hold a number";
        }
      } else if (!txt_why.empty() || !json_why.empty()) {
        why = "reward refused: " + (txt_why.empty() ? json_why : txt_why);
      } else {
        why = "verifier wrote no reward (exit code " + std::to_string(run.exit_code) + ")";
      }
    }
  }
  if (!(reward >= 0)) reward = 0;  // NaN too
  reward = std::min(1.0, reward);
  result.reward = reward;
  result.info = why;
  result.observation.text = "submitted: reward " + format_seconds(reward) + " (" + why + ")";
  cleanup();
  return result;
}

StepResult ShellEnv::do_step(const Action& action) {
  StepResult result;
  const std::string command = trim_space(action.text);
  if (command == "submit" || command == "task_complete") return verify();
  std::error_code ec;
  if (!fs::is_directory(scratch_ + "/app", ec)) {
    result.truncated = true;
    result.info = "the workspace vanished";
    result.observation.text = "ERROR: the workspace folder no longer exists; the episode ends";
    cleanup();
    return result;
  }
  if (command.empty()) {
    ++invalid_;
    result.info = "invalid command";
    result.observation.text = "ERROR: empty command (reply with a shell script, or submit)";
  } else {
    shell::SandboxLimits limits = config_.limits;
    const double left = task_.agent_timeout_sec - agent_time_used_ms_ / 1000.0;
    limits.wall_seconds = std::max(0.05, std::min(config_.command_timeout_sec, left));
    const shell::SandboxResult run = shell::run_sandboxed(command, paths(), limits);
    agent_time_used_ms_ += run.wall_ms;
    std::string status;
    if (!run.started) {
      status = "[sandbox error: " + run.error + "]";
      result.info = "sandbox error";
    } else if (run.timed_out) {
      status = "[killed: the command ran past " + format_seconds(limits.wall_seconds) + " s]";
      result.info = "command timed out";
    } else if (run.output_killed) {
      status = "[killed: more than " + std::to_string(limits.kill_output_bytes) + " bytes of output]";
      result.info = "output limit";
    } else {
      status = "[exit code " + std::to_string(run.exit_code) + "]";
    }
    std::string out = run.output;
    if (!out.empty() && out.back() != '\n') out += "\n";
    result.observation.text = out + status;
  }
  const std::string limit =
      agent_time_used_ms_ / 1000.0 >= task_.agent_timeout_sec
          ? "agent timeout (" + format_seconds(task_.agent_timeout_sec) + " s)"
          : turn_limit_reason(invalid_, config_.max_invalid, steps(), config_.max_turns);
  if (!limit.empty()) {
    result.truncated = true;
    result.info = limit;
  }
  if (result.truncated) cleanup();
  return result;
}

namespace {
const EnvRegistrar kShellEnvRegistrar(command_env_entry<ShellEnv>(
    "shell", "Harbor-style task folders run with /bin/sh in a sandbox (envs/shell)"));
}  // namespace

}  // namespace crl
