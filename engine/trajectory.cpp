#include "engine/trajectory.h"

#include <type_traits>

#include "engine/error.h"
#include "engine/sha256.h"

namespace crl {

std::string_view segment_kind_name(SegmentKind kind) {
  return kind == SegmentKind::kExecution ? "execution" : "summary";
}

std::string_view episode_status_name(EpisodeStatus status) {
  switch (status) {
    case EpisodeStatus::kCompleted:
      return "completed";
    case EpisodeStatus::kTruncated:
      return "truncated";
    case EpisodeStatus::kAborted:
      return "aborted";
    case EpisodeStatus::kFailed:
      return "failed";
  }
  return "unknown";
}

namespace {
// The six per-token vectors of a segment's response, which grow together.
template <class F>
void for_each_response_vector(Segment& segment, F f) {
  f(segment.response_ids);
  f(segment.response_provenance);
  f(segment.actor_mask);
  f(segment.critic_mask);
  f(segment.logprobs);
  f(segment.values);
}
}  // namespace

void Recorder::begin_execution(const PromptView& prompt, int compaction_index) {
  Segment segment;
  segment.kind = SegmentKind::kExecution;
  prompt.copy_to(segment.prompt_ids, &segment.prompt_provenance);
  segment.compaction_index = compaction_index;
  // Room for a window's worth of responses up front: growing six vectors in doubling steps was one
  // reallocation per turn or two of an agent session (tens of turns), each a heap block of KBs whose
  // allocation set off glibc's consolidation of the small blocks freed since (about 8% of a gateway turn's
  // instructions, bench/RESULTS.md ninth pass). finish() gives the unused room back.
  for_each_response_vector(segment, [](auto& v) { v.reserve(1024); });
  segments_.push_back(std::move(segment));
}

namespace {
void append_tokens(Segment& segment, std::span<const TokenId> tokens, Provenance provenance,
                   std::span<const float> logprobs, std::span<const float> values) {
  const bool sampled = is_trainable(provenance);
  CRL_CHECK(logprobs.empty() || logprobs.size() == tokens.size(), "log-probs do not match the tokens");
  CRL_CHECK(values.empty() || values.size() == tokens.size(), "values do not match the tokens");
  segment.response_ids.insert(segment.response_ids.end(), tokens.begin(), tokens.end());
  segment.response_provenance.insert(segment.response_provenance.end(), tokens.size(), provenance);
  segment.actor_mask.insert(segment.actor_mask.end(), tokens.size(), sampled ? 1 : 0);
  segment.critic_mask.insert(segment.critic_mask.end(), tokens.size(), sampled ? 1 : 0);
  if (sampled && !logprobs.empty()) {
    segment.logprobs.insert(segment.logprobs.end(), logprobs.begin(), logprobs.end());
  } else {
    segment.logprobs.insert(segment.logprobs.end(), tokens.size(), 0.0f);
  }
  if (sampled && !values.empty()) {
    segment.values.insert(segment.values.end(), values.begin(), values.end());
  } else {
    segment.values.insert(segment.values.end(), tokens.size(), 0.0f);
  }
  if (sampled) segment.n_sampled += static_cast<int64_t>(tokens.size());
}
}  // namespace

void Recorder::append(std::span<const TokenId> tokens, Provenance provenance, std::span<const float> logprobs,
                      std::span<const float> values, const std::string& finish_reason) {
  CRL_CHECK(!segments_.empty() && segments_.back().kind == SegmentKind::kExecution,
            "append() without an open execution segment");
  Segment& segment = segments_.back();
  append_tokens(segment, tokens, provenance, logprobs, values);
  if (!finish_reason.empty()) segment.finish_reason = finish_reason;
}

void Recorder::add_summary(const PromptView& prompt, std::span<const TokenId> summary,
                           std::span<const float> logprobs, std::span<const float> values,
                           const std::string& finish_reason, int compaction_index, std::string text) {
  Segment segment;
  segment.kind = SegmentKind::kSummary;
  prompt.copy_to(segment.prompt_ids, &segment.prompt_provenance);
  append_tokens(segment, summary, Provenance::kSampled, logprobs, values);
  segment.finish_reason = finish_reason;
  segment.compaction_index = compaction_index;
  segment.text = std::move(text);
  segments_.push_back(std::move(segment));
}

Trajectory Recorder::finish(Trajectory header) {
  Trajectory trajectory = std::move(header);
  trajectory.segments.clear();
  trajectory.dropped_segments = 0;
  for (Segment& segment : segments_) {
    // An execution segment with nothing sampled has nothing to train (a window of forced actions, or the
    // empty window left when an episode ends right after a summary): it is not emitted.
    if (segment.kind == SegmentKind::kExecution && segment.n_sampled == 0) {
      ++trajectory.dropped_segments;
      continue;
    }
    if (segment.response_ids.capacity() > segment.response_ids.size() + 256)  // (begin_execution's room)
      for_each_response_vector(segment, [](auto& v) { v.shrink_to_fit(); });
    trajectory.segments.push_back(std::move(segment));
  }
  segments_.clear();
  int64_t after = 0;
  for (auto it = trajectory.segments.rbegin(); it != trajectory.segments.rend(); ++it) {
    it->n_after = after;
    after += it->n_sampled;
  }
  trajectory.validate();
  return trajectory;
}

int64_t Trajectory::sampled_tokens() const {
  int64_t total = 0;
  for (const Segment& segment : segments) total += segment.n_sampled;
  return total;
}

void Trajectory::validate() const {
  // First every segment on its own (lengths, masks, n_s), then N_after against the verified n_s.
  for (size_t s = 0; s < segments.size(); ++s) {
    const Segment& segment = segments[s];
    const std::string where = "rollout " + quote(rollout_id) + " segment " + std::to_string(s);
    const size_t n = segment.response_ids.size();
    // The message is built only on failure: these checks run once per token of every finished episode,
    // and a message string per check (longer than the small-string buffer) was a heap allocation each.
    auto require = [&](bool ok, const char* field, const auto& what) {
      if (ok) return;
      if constexpr (std::is_invocable_v<decltype(what)>) {
        throw Error(where, field, what());
      } else {
        throw Error(where, field, what);
      }
    };
    require(segment.response_provenance.size() == n, "response_provenance",
            "length differs from response_ids");
    require(segment.prompt_provenance.size() == segment.prompt_ids.size(), "prompt_provenance",
            "length differs from prompt_ids");
    require(segment.actor_mask.size() == n, "loss_mask", "length differs from response_ids");
    require(segment.critic_mask.size() == n, "critic_mask", "length differs from response_ids");
    require(segment.logprobs.size() == n, "rollout_log_probs", "length differs from response_ids");
    require(segment.values.size() == n, "values", "length differs from response_ids");
    int64_t mask_sum = 0;
    for (size_t i = 0; i < n; ++i) {
      require(segment.actor_mask[i] <= 1 && segment.critic_mask[i] <= 1, "loss_mask",
              "mask entries are 0 or 1");
      if (segment.actor_mask[i] == 1) {
        require(is_trainable(segment.response_provenance[i]), "loss_mask", [&] {
          return "token " + std::to_string(i) + " is trainable but its provenance is " +
                 std::string(provenance_name(segment.response_provenance[i]));
        });
        ++mask_sum;
      }
    }
    require(mask_sum == segment.n_sampled, "n_sampled", [&] {
      return "value " + std::to_string(segment.n_sampled) + " differs from the loss_mask sum " +
             std::to_string(mask_sum);
    });
  }
  int64_t after = sampled_tokens();
  for (size_t s = 0; s < segments.size(); ++s) {
    after -= segments[s].n_sampled;
    if (segments[s].n_after != after) {
      throw Error("rollout " + quote(rollout_id) + " segment " + std::to_string(s), "n_after",
                  "value " + std::to_string(segments[s].n_after) +
                      " differs from the sampled tokens of later segments (" + std::to_string(after) + ")");
    }
  }
}

std::string Trajectory::hash() const {
  Sha256 h;
  auto str = [&](const std::string& s) { h.update_u64(s.size()).update(s); };
  str(rollout_id);
  str(env);
  str(task_id);
  h.update_u64(seed).update_u64(group_index).update_u64(sample_index).update_f64(reward);
  h.update_u64(static_cast<uint64_t>(status)).update_u64(compactions).update_u64(dropped_segments);
  h.update_u64(segments.size());
  for (const Segment& s : segments) {
    h.update_u64(static_cast<uint64_t>(s.kind)).update_u64(s.compaction_index);
    h.update_u64(s.prompt_ids.size()).update(s.prompt_ids.data(), s.prompt_ids.size() * sizeof(TokenId));
    h.update(s.prompt_provenance.data(), s.prompt_provenance.size());
    h.update_u64(s.response_ids.size())
        .update(s.response_ids.data(), s.response_ids.size() * sizeof(TokenId));
    h.update(s.response_provenance.data(), s.response_provenance.size());
    h.update(s.actor_mask.data(), s.actor_mask.size()).update(s.critic_mask.data(), s.critic_mask.size());
    for (float x : s.logprobs) h.update_f64(x);
    for (float x : s.values) h.update_f64(x);
    h.update_u64(s.n_sampled).update_u64(s.n_after);
    str(s.finish_reason);
    str(s.text);
  }
  return h.hex_digest();
}

}  // namespace crl
