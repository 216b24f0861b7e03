#pragma once
// The step-mode service over Episode (PROTOCOL.md section 2): create, step, batch step, state, export,
// delete, on protobuf messages. Transport-free (the router maps HTTP onto it; tests call it directly) and
// thread-safe: the session table serializes requests per episode.
//
// Step protocol. Every answer carries next_turn_id; a step must carry it as turn_id. A step whose turn_id is
// the last applied one, with the same action, is a retry: it gets the stored answer (identical bytes) and
// changes nothing. Any other turn_id is a 409. The action kind must match what was asked: `assistant` for an
// execute request, `summary` for a compaction_request. Actions given as text are tokenized with the episode's
// codec (the built-in byte tokenizer + ChatML until an LLM tokenizer is configured); token_ids are recorded
// exactly as sent. The answer's append_ids extend (previous prompt + action ids) to the next prompt; when the
// context was rebuilt (after a summary) or a summary is requested, prompt_ids carries the whole prompt.
//
// Tasks: task_id, or split + index (the task id is then "<split>-<index>", and an environment that declares
// a `split` parameter gets it from the request); a task_id of that form ("dev-3") means the same as
// split + index. Nothing is aliased: for an environment with a finite task list (Env::task_list(): the
// synthetic splits, the shell's task folders), an index past the end of the split or a task_id that names
// none of its tasks is 400 bad_task naming the split and its size.
//
// Budgets: fields the request leaves out come from the environment's default budget for the view
// (EnvSpec::text_budget / symbolic_budget). After the reset the budget is checked against the real first
// prompt (envs/episode.h budget_fit): one turn at the per-turn cap and its summary request must fit, and so
// must a rebuild after the longest summary; otherwise 400 bad_budget with the numbers and the smallest
// capacity that works. The file split: create_request.cpp (requests -> episodes), rollouts.cpp (rollout
// mode), prompt_delta.h (append_ids), this file's .cpp (the step protocol).
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/trajectory.h"
#include "envs/codec.h"
#include "proto/server.pb.h"
#include "server/export_ring.h"
#include "server/metrics.h"
#include "server/session_table.h"
#include "server/snapshot_store.h"

namespace crl::server {

struct ServiceOptions {
  size_t max_sessions = 1024;
  double idle_timeout_s = 600.0;
  uint32_t max_batch = 4096;
  // Reported by /v1/info (the transport enforces them).
  uint32_t max_body_bytes = 8u << 20;
  double request_timeout_s = 30.0;
  uint32_t threads = 1;
  // The tokenizer of the text view (engine/tokenizer.h make_tokenizer: "byte", a tokenizer.json or a
  // .tiktoken file). It must hold the ChatML tokens (<|im_start|>, <|im_end|>), as Qwen's does.
  std::string tokenizer = "byte";
  // Environment parameters set by the server's operator (`crl serve --env-param ENV.KEY=VALUE`): env name ->
  // KEY -> VALUE. They replace the declared defaults for every episode of that environment; a request may
  // override those that are not server_only (ParamSpec::server_only: host paths, host processes, sandbox
  // isolation), and gets 400 server_only_param for the others. Checked by the constructor (crl::Error).
  std::map<std::string, std::map<std::string, std::string>> env_params;
  // The largest timeout a client may choose (llm.request_timeout_s of POST /v1/rollouts, and environment
  // parameters declared as durations, e.g. shell.command_timeout_sec): a request above it gets 400
  // over_limit naming the field, the value and this limit (refused rather than clamped: a silently shorter
  // deadline would fail episodes the client believes have time). `crl serve --max-client-timeout`.
  double max_client_timeout_s = 600.0;
  // The most LLM requests one POST /v1/rollouts may keep in flight (llm.max_in_flight above it: 400).
  uint32_t max_llm_in_flight = 256;
  // The chat template of the text view: "chatml" | "plain" | PATH.jinja | PATH/tokenizer_config.json
  // (engine/chat_template.h: load_turn_template).
  std::string chat_template = "chatml";
  // Its variables on every render (`--default-chat-template-kwargs`, with_template_variables), compact JSON
  // text (as template_variables() writes it: snapshots compare it); empty: the template's own defaults.
  std::string chat_template_variables;
  // The operator's lists for the viewer (`crl serve --ui`, server/ui_routes.h): GET /v1/episodes lists every
  // live episode and GET /v1/exports the last `keep_exports` finished ones. Off by default (404 ui_disabled):
  // episode ids are capabilities, and a list hands every client's ids to whoever can reach the server.
  bool ui = false;
  size_t keep_exports = 32;
  size_t keep_exports_bytes = size_t{256} << 20;  // the ring's bound on the bytes of the exports it holds
  // `crl serve --backend-tag`: [a-z0-9]{1,16} put into every episode id ("ep-TAG-<32 hex>") so that a load
  // balancer routes a path naming an episode to this server (deploy/haproxy). Empty: "ep-<32 hex>".
  std::string backend_tag;
  // `crl serve --snapshot-dir DIR --snapshot-every N` (server/snapshot_store.h; deploy/README.md): every
  // session is snapshotted (creation request + action log + state hash) to DIR after every N-th applied step
  // (0: only at the drain, snapshot_all()), and a request naming an episode this server does not hold is
  // answered by restoring it from DIR by replay (the replay must reach the snapshot's state hash). Empty:
  // off.
  std::string snapshot_dir;
  uint32_t snapshot_every = 0;
  std::string snapshot_address;  // HOST:PORT of this server, written into ownership markers (messages only)
};

inline constexpr const char* kProtocolVersion = "1";

// Checks ServiceOptions::env_params against the registry (unknown env or parameter, mistyped value): throws
// crl::Error naming the option. The EpisodeService constructor calls it.
void check_env_params(const ServiceOptions& options);
// Checks ServiceOptions::backend_tag ([a-z0-9]{1,16} or empty): throws crl::Error naming --backend-tag.
void check_backend_tag(const std::string& tag);
// 2.5 -> "2.5", 600 -> "600" (for messages).
std::string format_seconds(double seconds);

class EpisodeService {
 public:
  explicit EpisodeService(ServiceOptions options);

  proto::HealthResponse health(bool draining) const;
  proto::InfoResponse info() const;
  proto::StepResponse create(const proto::CreateEpisodeRequest& request);
  // `episode_id` from the path; request.episode_id may repeat it.
  proto::StepResponse step(const std::string& episode_id, const proto::StepRequest& request);
  // Every item answered in request order, each with its own status (one failing item does not stop the rest).
  proto::BatchStepResponse batch_step(const proto::BatchStepRequest& request);
  proto::EpisodeState state(const std::string& episode_id);
  proto::ExportResponse export_segments(const std::string& episode_id);
  proto::DeleteResponse remove(const std::string& episode_id);
  // POST /v1/rollouts: creates the episodes (as create() would, text view only), runs them to their ends
  // against the LLM server of request.llm (policies/llm), and answers with every rollout's status and export.
  // Blocks the calling thread for the whole run; a failed LLM request fails its episode, not the call.
  proto::RolloutsResponse rollouts(const proto::RolloutsRequest& request);
  size_t reap_idle();
  // The drain (`crl serve` after SIGTERM, once no request runs): writes the snapshot of every session whose
  // snapshot is not current. Returns how many were written; failures are counted and reported on stderr.
  // Without snapshot_dir: nothing.
  size_t snapshot_all();
  // HOST:PORT of this server for snapshot ownership markers (after binding; nothing without snapshot_dir).
  void set_snapshot_address(const std::string& address) {
    if (store_) store_->set_address(address);
  }
  // GET /metrics (server/metrics.h): counted here, in the router and in the HTTP layer.
  ServerMetrics& metrics() { return metrics_; }
  // The operator's lists (options().ui; the caller checks it): live episodes newest first, the ring of
  // finished exports, one export of the ring (ApiError 404 unknown_export when it is not, or no longer,
  // held).
  proto::EpisodeList list_episodes(size_t offset, size_t limit);
  proto::EpisodeList list_exports(size_t offset, size_t limit) const { return exports_.list(offset, limit); }
  proto::ExportResponse recent_export(const std::string& episode_id) const;

  const ServiceOptions& options() const { return options_; }
  SessionTable& sessions() { return sessions_; }

 private:
  struct Built {
    std::unique_ptr<Episode> episode;  // not started yet
    Task task;
    std::string view;
    const char* task_field = "task_id";  // the request field that chose the task (for errors)
  };
  // Checks a create request and builds its episode, not yet started (throws ApiError naming the field).
  // create_request.cpp.
  Built build_episode(const proto::CreateEpisodeRequest& request) const;
  // Starts a built episode and checks its budget against the first prompt (ApiError 400 bad_task or
  // bad_budget).
  void start_episode(Built& built) const;
  // Segment i of a finished trajectory as the export record, with the server's metadata.
  proto::Segment export_segment(const Trajectory& trajectory, size_t i, const std::string& view,
                                const std::string& episode_id) const;

  // The answer describing what the trainer must do next; `full_prompt` always includes prompt_ids.
  proto::StepResponse describe(Session& session, bool full_prompt, std::span<const TokenId> action) const;

  // The step protocol on a locked, open session: validates and applies one step (or answers a retry).
  // `replay`: rebuilding from a snapshot (no metrics, no snapshot write).
  proto::StepResponse apply_step(Session& s, const proto::StepRequest& request, bool replay);
  // session_restore.cpp: the session named `id`, held here or restored from snapshot_dir (ApiError 404
  // unknown_episode, 503 session_lost / session_held_elsewhere, 500 bad_snapshot / snapshot_mismatch).
  std::shared_ptr<Session> find_session(const std::string& id);
  std::shared_ptr<Session> restore(const std::string& id);
  // Rebuilds the session of a snapshot read from `path` (checked against this server's configuration).
  std::shared_ptr<Session> replay(const proto::SessionSnapshot& snapshot, const std::string& path);
  // Writes the snapshot of a session (`s.mutex` held); false (counted, reported) when it fails.
  bool write_snapshot(Session& s);
  // Removes a session's snapshot files (DELETE, the reaper).
  void forget_snapshot(const std::string& id);

  // The export of a finished episode (builds its trajectory once); `s.mutex` held.
  proto::ExportResponse make_export(Session& s) const;
  // Updates the list's counters after a request; with options_.ui, puts a newly finished episode's export in
  // the ring. `s.mutex` held.
  void after_request(Session& s);

  ServiceOptions options_;
  SessionTable sessions_;
  ExportRing exports_;
  ServerMetrics metrics_;
  std::unique_ptr<SnapshotStore> store_;  // with options_.snapshot_dir
  std::mutex restore_mutex_;              // one restore at a time (two requests for one id restore it once)
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const Codec> text_codec_;
  double started_s_ = 0;
};

}  // namespace crl::server
