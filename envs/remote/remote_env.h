#pragma once
// `remote`: an environment that lives in another process (for example a Python environment), reached over
// HTTP/1.1 with the server's step protocol (PROTOCOL.md section 2, proto/server.proto; envs/remote/README.md
// says which fields an environment process fills). Scenarios, rollouts and the conformance battery use it
// like a native environment; the engine's Episode keeps the context, the process only answers reset and step.
//
//   GET  /v1/info                  once per endpoint: protocol version, the environment's name and views,
//   limits POST /v1/episodes              reset: {env, task_id, split, index, seed} -> {episode_id,
//   prompt_text = the
//                                  system prompt, append_text = the first observation, next_turn_id}
//   POST /v1/episodes/{id}/step    one step: {turn_id, action {kind: assistant, text}} -> {append_text = the
//                                  observation, reward = this step's reward, terminated, truncated, reason =
//                                  info}
//   POST /v1/batch/step            the steps of many episodes in one request (see below)
//   DELETE /v1/episodes/{id}       an episode dropped before its end (an ended one is forgotten by the
//   process)
//
// Batching (DESIGN.md rule 9): every RemoteEnv of one host:port shares a RemoteEndpoint, which is their
// StepBatcher (envs/env.h). The lockstep driver announces the steps of a policy round together, so the
// endpoint sends them as ONE /v1/batch/step and each step() returns its prefetched result; a step() that was
// not announced (a direct call) is one /v1/episodes/{id}/step. The endpoint keeps a pool of keep-alive
// connections, so threads driving different groups never wait for each other's requests.
//
// With port = 0 the environment starts `command` itself (by default the Python reference environment,
// clients/python/crl_remote_env.py), reads "PORT <n>" from its first output line, and stops it (SIGTERM, then
// SIGKILL of its process group) when the last environment using it is destroyed; other instances reach the
// same process with {port: <n>}. A refused connection, no answer within `timeout_ms`, a closed connection, an
// error answer or a malformed one are crl::Errors naming the endpoint, the request and the field: inside an
// Episode the step then ends the episode as failed with that reason, never hangs. The seed of a reset is
// drawn from the episode's environment stream, so the remote side can be as deterministic as a native
// environment.
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "envs/env.h"

namespace crl {

namespace remote {
class RemoteEndpoint;
}

// The default `command`: the reference environment, clients/python/crl_remote_env.py, by absolute path, found
// next to this binary (build/crl: ../clients/python) or in the source tree it was built from, so that a
// server started from any directory starts it; the path relative to the working directory only where
// neither holds it (then the start fails with an error naming the directory it ran in).
std::string default_remote_command();

struct RemoteConfig {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: start `command` and read the port it prints ("PORT <n>" on its first stdout line)
  std::string command = default_remote_command();
  std::string env;                        // the process's environment; "": the first one /v1/info lists
  std::string wire = "json";              // json | protobuf (Content-Type of requests and answers)
  bool batch = true;                      // false: one request per step, even in lockstep rounds
  int timeout_ms = 10000;                 // per request
  int start_timeout_ms = 30000;           // for the "PORT <n>" line of a started command
  size_t max_observation_bytes = 65536;   // longer observations keep head and tail
  size_t max_response_bytes = 64u << 20;  // a longer answer is an error
};

class RemoteEnv final : public Env {
 public:
  explicit RemoteEnv(RemoteConfig config);
  // Deletes the remote episode when it is still open (best effort), then releases the endpoint.
  ~RemoteEnv() override;
  const EnvSpec& spec() const override { return spec_; }
  StepBatcher* step_batcher() const override;
  // The port in use (0 before the first reset). Other instances can share a started process through it.
  int port() const;
  // The id the process gave the current episode ("" before the first reset).
  const std::string& episode_id() const { return episode_id_; }

  static std::vector<ParamSpec> param_specs();
  static RemoteConfig config_from(const Params& params);

 protected:
  Start do_reset(const Task& task, Rng& rng) override;
  StepResult do_step(const Action& action) override;

 private:
  friend class remote::RemoteEndpoint;
  void close_remote();  // DELETE of an open episode, errors ignored

  RemoteConfig config_;
  EnvSpec spec_;
  std::shared_ptr<remote::RemoteEndpoint> endpoint_;
  std::string episode_id_;
  uint32_t next_turn_id_ = 0;
  bool open_ = false;  // the process holds the episode (reset and not ended)

  // A step announced to the batcher and answered in advance: step() must then get the same action.
  struct Prefetched {
    std::string action;
    std::optional<StepResult> result;
    uint32_t next_turn_id = 0;
    std::optional<Error> error;
  };
  std::optional<Prefetched> prefetched_;
};

}  // namespace crl
