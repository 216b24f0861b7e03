#pragma once
// The flat batch every learner back-end consumes (DESIGN.md "Interfaces").
//
// Why struct-of-arrays: the estimator and the losses stream over tokens; one contiguous array per field
// lets the CPU vectorize and lets the CUDA back-end copy each field to the device in one transfer. Segments
// and rollouts are described only by offsets, so a batch of any shape is three flat levels:
//   tokens   [0, num_tokens)                      values, masks, log-probs, kind
//   segments [0, num_segments), token ranges      segment_offsets[s] .. segment_offsets[s + 1]
//   rollouts [0, num_rollouts), segment ranges    rollout_offsets[r] .. rollout_offsets[r + 1]
// Every token belongs to the response of one segment (prompts are not part of a batch).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/trajectory.h"

namespace crl::learners {

struct Batch {
  // ---- token level (num_tokens each; the optional ones may be empty) ----
  std::vector<double> values;        // V(x) at sampling time: the critic values GAE runs on
  std::vector<uint8_t> actor_mask;   // 1 on tokens that get policy loss
  std::vector<uint8_t> critic_mask;  // 1 on tokens GAE runs over and that get value loss
  std::vector<double> old_logprobs;  // behaviour log-probs (optional: empty = zeros)
  std::vector<double> new_logprobs;  // current policy log-probs (optional: empty = old_logprobs)
  std::vector<double> ref_logprobs;  // reference policy log-probs for the k3 KL (optional: empty = old)
  std::vector<double> new_values;    // current critic values for the value loss (optional: empty = values)
  std::vector<SegmentKind> kind;     // kind of the segment the token belongs to
  // ---- segment level ----
  std::vector<int64_t> segment_offsets{0};  // num_segments + 1 token offsets
  std::vector<SegmentKind> segment_kind;    // num_segments
  // ---- rollout level ----
  std::vector<int64_t> rollout_offsets{0};  // num_rollouts + 1 segment offsets
  std::vector<double> rewards;              // the one terminal reward of each rollout, shared by its segments
  std::vector<std::string> rollout_ids;     // optional, for error messages

  int64_t num_tokens() const { return static_cast<int64_t>(values.size()); }
  int64_t num_segments() const { return static_cast<int64_t>(segment_kind.size()); }
  int64_t num_rollouts() const { return static_cast<int64_t>(rewards.size()); }
  // Name of rollout r for messages: its id when known, else "rollout <r>".
  std::string rollout_name(int64_t r) const;

  // Appends one segment to the last rollout started with begin_rollout(); masks and values must have equal
  // lengths (checked by validate()).
  void begin_rollout(double reward, std::string id = "");
  void add_segment(SegmentKind segment_kind, const std::vector<double>& segment_values,
                   const std::vector<uint8_t>& segment_actor_mask,
                   const std::vector<uint8_t>& segment_critic_mask);

  // Checks shapes and offsets (monotone, covering every token and segment, optional arrays empty or full
  // length, masks 0/1, finite numbers). Throws crl::Error naming the rollout, the segment and the field.
  void validate() const;
};

// Flattens validated trajectories: one rollout per trajectory, one segment per segment, every response token
// (log-probs and values as recorded; masks as recorded).
Batch make_batch(const std::vector<crl::Trajectory>& trajectories);

}  // namespace crl::learners
