#pragma once
// OpenEnv compatibility: one WebSocket session of OpenEnv's protocol (meta-pytorch/OpenEnv,
// core/env_server: `/ws`), mapped onto the engine's own episode API so that OpenEnv clients drive our
// environments unchanged. Transport-free: the WebSocket transport (http_server.cpp) hands each text message
// to handle() on the worker pool and writes back what it returns; tests drive it without sockets.
//
// Messages in (JSON text frames), as OpenEnv's WSIncomingMessage:
//   {"type": "reset", "data": {...}}  creates (or restarts) the session's episode. data takes the fields of
//        POST /v1/episodes (env, task_id | split + index, seed, group_index, sample_index, budget, params,
//        view) plus OpenEnv's `episode_id`, which becomes the rollout id. `env` may be omitted when the
//        server was given a default (crl serve --openenv-env NAME).
//   {"type": "step", "data": {action}}  one action: {text} or {token_ids, logprobs}, finish_reason, and
//        kind (assistant | summary; default: what the episode asked for). The session carries turn_id.
//   {"type": "state"}   the episode's state (GET /v1/episodes/{id}), with OpenEnv's episode_id and
//        step_count.
//   {"type": "close"}   deletes the episode; the transport then closes the socket (no answer).
// Answers: {"type": "observation", "data": {"observation": {...}, "reward": r | null, "done": b,
//   "metadata": {...}}} (OpenEnv's serialize_observation layout), {"type": "state", "data": {...}} or
//   {"type": "error", "data": {"message", "code", ...}} with OpenEnv's WSErrorCode values: INVALID_JSON,
//   UNKNOWN_TYPE, VALIDATION_ERROR (a 4xx of the engine: the engine's code and field are in crl_code and
//   field), CAPACITY_REACHED (429, with retry_after), SESSION_ERROR (no episode yet, or it is gone),
//   EXECUTION_ERROR (anything else). A bad message never ends the session.
// The observation: {"text", "ids"} to append to the context the client holds (the action's ids, then the
//   environment's), or, when `prompt_rebuilt` (reset, a compaction request, a rebuild after a summary), the
//   whole new prompt in {"prompt_text", "prompt_ids"}; "role" (execute | summarize) and "max_new_tokens".
//   Compaction requests are carried in the metadata: metadata.kind is "observation" | "compaction_request" |
//   "done", and metadata.compaction_request is true when the next action must be the summary (the
//   observation's prompt then ends with the summary instruction). metadata also holds episode_id, turn_id,
//   state_hash, status, reason, compactions, turn, terminated, truncated, rollout_id and task_id.
#include <string>
#include <string_view>

#include "server/episode_service.h"

namespace crl::server {

struct OpenEnvReply {
  std::string text;    // the JSON answer (empty: none)
  bool close = false;  // the client asked to close: the transport closes the socket after writing text
};

class OpenEnvSession {
 public:
  OpenEnvSession(EpisodeService& service, std::string default_env)
      : service_(service), default_env_(std::move(default_env)) {}
  OpenEnvSession(const OpenEnvSession&) = delete;
  OpenEnvSession& operator=(const OpenEnvSession&) = delete;
  ~OpenEnvSession() { end(); }

  OpenEnvReply handle(std::string_view message);
  // Deletes the session's episode, if any (the socket closed, or the session is dropped). Idempotent.
  void end();

  const std::string& episode_id() const { return episode_id_; }

 private:
  EpisodeService& service_;
  std::string default_env_;
  std::string episode_id_;
  uint32_t next_turn_id_ = 0;
  std::string pending_kind_;  // observation | compaction_request | done
};

// GET /schema and GET /metadata (OpenEnv's HTTP discovery routes), as JSON bodies.
std::string openenv_schema_json();
std::string openenv_metadata_json(const EpisodeService& service);

}  // namespace crl::server
