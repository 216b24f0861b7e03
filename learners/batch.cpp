#include "learners/batch.h"

#include <cmath>

#include "engine/error.h"

namespace crl::learners {

std::string Batch::rollout_name(int64_t r) const {
  if (r >= 0 && r < static_cast<int64_t>(rollout_ids.size()) && !rollout_ids[r].empty()) {
    return "rollout " + quote(rollout_ids[r]);
  }
  return "rollout " + std::to_string(r);
}

void Batch::begin_rollout(double reward, std::string id) {
  rewards.push_back(reward);
  rollout_ids.push_back(std::move(id));
  rollout_offsets.push_back(rollout_offsets.back());
}

void Batch::add_segment(SegmentKind segment_kind_value, const std::vector<double>& segment_values,
                        const std::vector<uint8_t>& segment_actor_mask,
                        const std::vector<uint8_t>& segment_critic_mask) {
  CRL_CHECK(!rewards.empty(), "add_segment before begin_rollout");
  values.insert(values.end(), segment_values.begin(), segment_values.end());
  actor_mask.insert(actor_mask.end(), segment_actor_mask.begin(), segment_actor_mask.end());
  critic_mask.insert(critic_mask.end(), segment_critic_mask.begin(), segment_critic_mask.end());
  kind.insert(kind.end(), segment_values.size(), segment_kind_value);
  segment_offsets.push_back(static_cast<int64_t>(values.size()));
  segment_kind.push_back(segment_kind_value);
  ++rollout_offsets.back();
}

void Batch::validate() const {
  const int64_t num_t = num_tokens();
  const int64_t num_s = num_segments();
  const int64_t num_r = num_rollouts();
  auto fail = [&](const std::string& where, const std::string& field, const std::string& message) {
    throw Error("batch: " + where, field, message);
  };
  if (static_cast<int64_t>(rollout_offsets.size()) != num_r + 1 || rollout_offsets.front() != 0 ||
      rollout_offsets.back() != num_s) {
    fail("rollouts", "rollout_offsets",
         "expected " + std::to_string(num_r + 1) + " offsets from 0 to " + std::to_string(num_s) +
             " (the segment count)");
  }
  if (static_cast<int64_t>(segment_offsets.size()) != num_s + 1 || segment_offsets.front() != 0 ||
      segment_offsets.back() != num_t) {
    fail("segments", "segment_offsets",
         "expected " + std::to_string(num_s + 1) + " offsets from 0 to " + std::to_string(num_t) +
             " (the token count)");
  }
  auto check_len = [&](size_t size, const char* field, bool optional) {
    if (optional && size == 0) return;
    if (static_cast<int64_t>(size) != num_t) {
      fail(
          "tokens", field,
          "has " + std::to_string(size) + " entries, expected one per token (" + std::to_string(num_t) + ")");
    }
  };
  check_len(actor_mask.size(), "actor_mask", false);
  check_len(critic_mask.size(), "critic_mask", false);
  check_len(kind.size(), "kind", false);
  check_len(old_logprobs.size(), "old_logprobs", true);
  check_len(new_logprobs.size(), "new_logprobs", true);
  check_len(ref_logprobs.size(), "ref_logprobs", true);
  check_len(new_values.size(), "new_values", true);
  if (old_logprobs.empty() && (!new_logprobs.empty() || !ref_logprobs.empty())) {
    fail("tokens", new_logprobs.empty() ? "ref_logprobs" : "new_logprobs", "given without old_logprobs");
  }
  if (!rollout_ids.empty() && static_cast<int64_t>(rollout_ids.size()) != num_r) {
    fail("rollouts", "rollout_ids", "expected one id per rollout or none");
  }
  for (int64_t r = 0; r < num_r; ++r) {
    const std::string rname = rollout_name(r);
    if (!std::isfinite(rewards[r])) fail(rname, "reward", "is not a finite number");
    if (rollout_offsets[r + 1] < rollout_offsets[r]) fail(rname, "rollout_offsets", "offsets decrease");
    for (int64_t s = rollout_offsets[r]; s < rollout_offsets[r + 1]; ++s) {
      const std::string where = rname + " segment " + std::to_string(s - rollout_offsets[r]);
      if (segment_offsets[s + 1] < segment_offsets[s]) fail(where, "segment_offsets", "offsets decrease");
      for (int64_t t = segment_offsets[s]; t < segment_offsets[s + 1]; ++t) {
        const std::string at = " at token " + std::to_string(t - segment_offsets[s]);
        if (actor_mask[t] > 1)
          fail(where, "actor_mask", "is " + std::to_string(actor_mask[t]) + at + ", expected 0 or 1");
        if (critic_mask[t] > 1)
          fail(where, "critic_mask", "is " + std::to_string(critic_mask[t]) + at + ", expected 0 or 1");
        if (kind[t] != segment_kind[s]) fail(where, "kind", "token kind differs from the segment kind" + at);
        if (!std::isfinite(values[t])) fail(where, "values", "is not finite" + at);
        if (!new_values.empty() && !std::isfinite(new_values[t]))
          fail(where, "new_values", "is not finite" + at);
        if (!old_logprobs.empty() && !std::isfinite(old_logprobs[t]))
          fail(where, "old_logprobs", "is not finite" + at);
        if (!new_logprobs.empty() && !std::isfinite(new_logprobs[t]))
          fail(where, "new_logprobs", "is not finite" + at);
        if (!ref_logprobs.empty() && !std::isfinite(ref_logprobs[t]))
          fail(where, "ref_logprobs", "is not finite" + at);
      }
    }
  }
}

Batch make_batch(const std::vector<crl::Trajectory>& trajectories) {
  Batch batch;
  int64_t total = 0;
  for (const Trajectory& tr : trajectories) {
    for (const Segment& sg : tr.segments) total += static_cast<int64_t>(sg.response_ids.size());
  }
  batch.values.reserve(total);
  batch.actor_mask.reserve(total);
  batch.critic_mask.reserve(total);
  batch.old_logprobs.reserve(total);
  batch.kind.reserve(total);
  for (const Trajectory& tr : trajectories) {
    batch.begin_rollout(tr.reward, tr.rollout_id);
    for (size_t i = 0; i < tr.segments.size(); ++i) {
      const Segment& sg = tr.segments[i];
      const size_t n = sg.response_ids.size();
      const std::string where = "trajectory " + quote(tr.rollout_id) + " segment " + std::to_string(i);
      if (sg.actor_mask.size() != n || sg.critic_mask.size() != n) {
        throw Error(where, sg.actor_mask.size() != n ? "actor_mask" : "critic_mask",
                    "length differs from the response (" + std::to_string(n) + " tokens)");
      }
      if ((!sg.values.empty() && sg.values.size() != n) ||
          (!sg.logprobs.empty() && sg.logprobs.size() != n)) {
        throw Error(where, sg.values.size() != n ? "values" : "logprobs",
                    "length differs from the response (" + std::to_string(n) + " tokens)");
      }
      std::vector<double> values(n, 0.0);
      for (size_t t = 0; t < sg.values.size(); ++t) values[t] = sg.values[t];
      batch.add_segment(sg.kind, values, sg.actor_mask, sg.critic_mask);
      for (size_t t = 0; t < n; ++t) batch.old_logprobs.push_back(sg.logprobs.empty() ? 0.0 : sg.logprobs[t]);
    }
  }
  batch.validate();
  return batch;
}

}  // namespace crl::learners
