#pragma once
// Trajectories: one logical rollout as chronological segments (spec section 1.2).
//
// An execution segment's prompt is the window's starting context; its response is every later token of that
// window (actions, observations, turn headers). A summary segment's prompt is the history plus the summary
// instruction; its response is the summary. The actor mask is 1 exactly on kSampled tokens; the critic mask
// defaults to the actor mask. All segments share the rollout's one terminal reward. N_after(s) is the number
// of sampled tokens in later segments of the same rollout.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/token.h"

namespace crl {

enum class SegmentKind : uint8_t { kExecution = 0, kSummary = 1 };
enum class EpisodeStatus : uint8_t { kCompleted = 0, kTruncated = 1, kAborted = 2, kFailed = 3 };
std::string_view segment_kind_name(SegmentKind kind);
std::string_view episode_status_name(EpisodeStatus status);

struct Segment {
  SegmentKind kind = SegmentKind::kExecution;
  std::vector<TokenId> prompt_ids;
  std::vector<Provenance> prompt_provenance;
  std::vector<TokenId> response_ids;
  std::vector<Provenance> response_provenance;
  std::vector<uint8_t> actor_mask;
  std::vector<uint8_t> critic_mask;
  std::vector<float> logprobs;  // behaviour log-probs, 0 where the actor mask is 0
  std::vector<float> values;    // critic values at sampling time, 0 where none were given
  int64_t n_sampled = 0;        // n_s = sum of the actor mask
  int64_t n_after = 0;          // N_after(s)
  int compaction_index = 0;     // compactions before this segment
  std::string finish_reason;    // of the last sampled call in the segment
  std::string text;             // the response decoded for reading (summary text), may be empty
};

struct Trajectory {
  std::string rollout_id;
  std::string env;
  std::string task_id;
  uint64_t seed = 0;
  int64_t group_index = 0;
  int64_t sample_index = 0;
  double reward = 0.0;
  EpisodeStatus status = EpisodeStatus::kCompleted;
  std::string reason;  // why the episode was truncated, aborted or failed
  int compactions = 0;
  int dropped_segments = 0;  // execution segments with no sampled token, not emitted
  std::vector<Segment> segments;
  std::map<std::string, std::string> metadata;  // sorted, so exports are byte-stable

  // Checks the export invariants: contiguous segment indices, masks and log-probs the length of the
  // response, n_s equal to the actor-mask sum, actor mask only on sampled tokens, N_after consistent.
  // Throws crl::Error naming the rollout, the segment and the field.
  void validate() const;
  // SHA-256 (hex) over every field that shapes training: equal trajectories have equal hashes.
  std::string hash() const;
  int64_t sampled_tokens() const;
};

// Builds a Trajectory while an episode runs.
class Recorder {
 public:
  // Opens an execution segment whose prompt is `prompt` (the window's starting context).
  void begin_execution(const PromptView& prompt, int compaction_index);
  // Appends response tokens to the open execution segment. Sampled tokens get actor and critic mask 1 and
  // their log-probs / values (either may be empty: zeros); every other provenance gets masks 0.
  void append(std::span<const TokenId> tokens, Provenance provenance, std::span<const float> logprobs = {},
              std::span<const float> values = {}, const std::string& finish_reason = "");
  // Adds a complete summary segment (the open execution segment, if any, is closed first).
  void add_summary(const PromptView& prompt, std::span<const TokenId> summary,
                   std::span<const float> logprobs, std::span<const float> values,
                   const std::string& finish_reason, int compaction_index, std::string text);
  // Closes the episode: drops execution segments without a sampled token, sets N_after and the shared
  // reward, and validates.
  Trajectory finish(Trajectory header);
  bool empty() const { return segments_.empty(); }
  Segment* open_segment() { return segments_.empty() ? nullptr : &segments_.back(); }

 private:
  std::vector<Segment> segments_;
};

}  // namespace crl
