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
// a `split` parameter gets it from the request). An environment that rejects the task answers 400 bad_task.
#include <memory>
#include <string>

#include "engine/trajectory.h"
#include "envs/codec.h"
#include "proto/server.pb.h"
#include "server/session_table.h"

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
  // The chat template of the text view: "chatml" | "plain" (engine/chat_template.h).
  std::string chat_template = "chatml";
};

inline constexpr const char* kProtocolVersion = "1";

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
  size_t reap_idle() { return sessions_.reap_idle(); }

  const ServiceOptions& options() const { return options_; }
  SessionTable& sessions() { return sessions_; }

 private:
  struct Built {
    std::unique_ptr<Episode> episode;  // not started yet
    Task task;
    std::string view;
  };
  // Checks a create request and builds its episode, not yet started (throws ApiError naming the field).
  Built build_episode(const proto::CreateEpisodeRequest& request) const;
  // Segment i of a finished trajectory as the export record, with the server's metadata.
  proto::Segment export_segment(const Trajectory& trajectory, size_t i, const std::string& view,
                                const std::string& episode_id) const;

  // The answer describing what the trainer must do next; `full_prompt` always includes prompt_ids.
  proto::StepResponse describe(Session& session, bool full_prompt, std::span<const TokenId> action) const;

  ServiceOptions options_;
  SessionTable sessions_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const Codec> text_codec_;
  double started_s_ = 0;
};

}  // namespace crl::server
