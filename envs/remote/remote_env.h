#pragma once
// `remote`: an environment that lives in another process (for example a Python environment), reached over a
// local TCP socket with a line-delimited JSON protocol (envs/remote/README.md). Scenarios, rollouts and the
// conformance battery use it like a native environment.
//
// One request line, one response line, in order, on one connection per Env instance (opened at the first
// reset, re-opened after a failure):
//   {"op":"reset","task":{"id":..,"index":..,"split":..},"seed":"<u64>"}  -> {"system":..,"user":..}
//   {"op":"step","action":".."}  -> {"observation":..,"reward":..,"terminated":..,"truncated":..,"info":..}
// With port = 0 the environment starts `command` itself (by default the Python reference environment,
// clients/python/crl_remote_env.py), reads "PORT <n>" from its first output line, and stops it (SIGTERM, then
// SIGKILL) when destroyed.
// A response {"error":".."} becomes a crl::Error; so do a refused connection, a timeout (`timeout_ms` per
// request), a closed connection or malformed JSON: the Episode then ends as failed with the reason, never
// hangs. The seed of a reset is drawn from the episode's environment stream, so the remote side can be as
// deterministic as a native environment.
#include <sys/types.h>

#include <string>

#include "envs/env.h"

namespace crl {

struct RemoteConfig {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: start `command` and read the port it prints ("PORT <n>" on its first stdout line)
  std::string command = "/usr/bin/python3 clients/python/crl_remote_env.py --port 0";
  int timeout_ms = 10000;
  size_t max_observation_bytes = 65536;  // longer observations keep head and tail
  size_t max_line_bytes = 16 << 20;      // a response line longer than this is an error
};

class RemoteEnv final : public Env {
 public:
  explicit RemoteEnv(RemoteConfig config);
  ~RemoteEnv() override;
  const EnvSpec& spec() const override { return spec_; }
  // The port in use (0 before the first reset). Other instances can share a started process through it.
  int port() const { return port_; }

  static std::vector<ParamSpec> param_specs();
  static RemoteConfig config_from(const Params& params);

 protected:
  Start do_reset(const Task& task, Rng& rng) override;
  StepResult do_step(const Action& action) override;

 private:
  // Sends one line and reads one line; throws crl::Error (and closes the connection) on any failure.
  std::string call(const std::string& line);
  void connect_once();
  void disconnect();
  void spawn();  // starts `command` (port = 0); the process is stopped by the destructor

  pid_t child_ = -1;
  int port_ = 0;  // the port in use

  RemoteConfig config_;
  EnvSpec spec_;
  int fd_ = -1;
  std::string buffer_;  // bytes read past the last line
};

}  // namespace crl
