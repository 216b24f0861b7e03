#pragma once
// The budgeted context of one episode (spec section 1.1): the history the policy sees, its token count,
// the compaction trigger, the summary request, and the rebuild after a summary.
//
// The history is h = prefix + z_1 .. z_t, where the prefix is system + user (or system + resume(summary)
// after a compaction) and each z_i is an atomic step: the assistant turn (turn header + action) and every
// observation before the next assistant turn. Steps are never split.
//
// Storage: every token lives once in an append-only TokenArena; the window is a list of spans into it.
// A step costs O(its tokens); a rebuild writes the resume message and re-uses the kept steps' spans, so it
// costs O(resume + number of spans), never O(context).
//
// Token accounting: tokens() is the rendered size of the next execution request, i.e. the window plus the
// assistant turn header that opens the next turn (none when the last observation opened it: see
// append_observation). The trigger C - tokens() < T_comp is checked by the
// episode before each execution request; it fires only if the window already holds a generated (sampled or
// forced) action (guard (a): never compact a window with no generated token).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/budget.h"
#include "engine/token.h"

namespace crl {

// Tokens the chat template (or a symbolic environment) puts around the parts the context manages.
struct ContextTemplate {
  std::vector<TokenId> turn_header;          // opens each assistant turn ("<|im_start|>assistant\n")
  std::vector<TokenId> summary_instruction;  // q_sum as a user turn, followed by the assistant turn header
  std::vector<TokenId> resume_prefix;        // resume(S) = resume_prefix + S + resume_suffix (one user turn)
  std::vector<TokenId> resume_suffix;
  std::vector<TokenId> truncation_marker;  // stands for the middle cut out of an over-long observation
};

// A prompt: spans (index ranges) over an arena. Cheap to pass around; valid while the Context that made it
// lives at the same address (spans are indices, so later appends do not invalidate it).
class PromptView {
 public:
  PromptView() = default;
  PromptView(const TokenArena* arena, std::vector<Span> spans);
  // Refills the view in place (keeps the span list's capacity: no allocation once it has grown).
  void assign(const TokenArena* arena, std::span<const Span> first, std::span<const Span> second, Span last);
  const std::vector<Span>& spans() const { return spans_; }
  int64_t size() const { return size_; }
  std::span<const TokenId> tokens(const Span& span) const { return arena_->view(span); }
  TokenId back() const;  // the last token (the prompt must not be empty)
  void copy_to(std::vector<TokenId>& ids, std::vector<Provenance>* provenance = nullptr) const;
  std::vector<TokenId> ids() const {
    std::vector<TokenId> out;
    copy_to(out);
    return out;
  }

 private:
  const TokenArena* arena_ = nullptr;
  std::vector<Span> spans_;
  int64_t size_ = 0;
};

enum class RebuildStatus { kRebuilt, kDoesNotFit };
struct RebuildResult {
  RebuildStatus status = RebuildStatus::kDoesNotFit;
  int kept_steps = 0;  // k actually kept (tail_k reduced until the window fits below C - T_comp)
};

class Context {
 public:
  Context(const Budget& budget, const ContextTemplate& tmpl);
  // Prompt views point at this object's arena: a context never moves.
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Starts (or restarts) an episode with the encoded system and first user turn. Returns false when the
  // first request would already be >= C: the episode cannot run (it ends as failed, spec 1.1 (a)).
  // `opens_turn`: the user part ends with what opens the first assistant turn (as append_observation's).
  bool start(std::span<const TokenId> system, std::span<const TokenId> user, bool opens_turn = false);

  const Budget& budget() const { return budget_; }
  int64_t tokens() const { return window_tokens_ + next_header().size(); }
  int compactions() const { return compactions_; }
  int steps_in_window() const { return static_cast<int>(steps_.size()); }
  bool window_has_action() const { return window_has_action_; }
  // Makes the next needs_compaction() true even if the budget still has room (an environment's scripted
  // reset point, e.g. the memory chain's steps 24, 48 and 72). Guards still apply.
  void request_compaction() { compaction_requested_ = true; }

  // The trigger, checked before each execution request: C - tokens() < T_comp (or a requested reset), and
  // the window holds at least one generated action.
  bool needs_compaction() const;
  // True when the trigger fires but no compaction is left: the episode ends as truncated.
  bool compactions_exhausted() const { return compactions_ >= budget_.max_compactions; }
  // min(per_turn_cap, C - tokens()); <= 0 means no room for another turn.
  int64_t max_new_tokens() const;

  PromptView execution_prompt() const;
  // The same, written into `out` without allocating (the per-turn path).
  void execution_prompt(PromptView& out) const;
  // The history plus the summary instruction. When it is over C - summary_cap, the largest observations are
  // halved in a temporary copy (head third and tail two thirds around the truncation marker) until it fits;
  // the live history is unchanged. Returns false when nothing is left to shrink.
  bool summary_prompt(PromptView& prompt) const;
  int64_t summary_max_new_tokens(const PromptView& prompt) const;

  // Appends an assistant turn (turn header + action tokens, which are kSampled or kForced) as a new step.
  void append_action(std::span<const TokenId> action, Provenance provenance);
  // Appends an observation to the current step (or, before any action, to the prefix). `opens_turn`: the
  // observation ends with what opens the next assistant turn, so that turn has no header of its own (a chat
  // template that writes none there: DeepSeek-V3 closes tool results with "<｜tool▁outputs▁end｜>" and the
  // model answers right after it). The last non-empty observation before an action decides.
  void append_observation(std::span<const TokenId> observation, bool opens_turn = false);
  // The tokens that open the next assistant turn: the template's turn header, or none after an observation
  // that opened the turn.
  std::span<const TokenId> next_turn_header() const { return arena_.view(next_header()); }

  // After a summary: the window becomes system + resume(summary) + the newest k steps, with k = tail_k,
  // then smaller, until tokens() < C - T_comp. Counts one compaction either way.
  RebuildResult rebuild(std::span<const TokenId> summary);

  const TokenArena& arena() const { return arena_; }
  // Reserves arena room for `tokens` more tokens, so a long episode never reallocates mid-way.
  void reserve(size_t tokens) { arena_.reserve(arena_.size() + tokens); }
  // Spans of the window (without the turn header), for inspection.
  std::vector<Span> window_spans() const;

 private:
  // Steps index into one flat span list (no allocation per step): step i owns step_spans_[first_span ..
  // next step's first_span): the turn header, the action, then its observations.
  struct Step {
    size_t first_span = 0;
    int64_t tokens = 0;
  };
  size_t step_end(size_t i) const {
    return i + 1 < steps_.size() ? steps_[i + 1].first_span : step_spans_.size();
  }
  // The next turn's header span: header_, or an empty span (the same one every time, so prompts that
  // extend each other share it) when the last observation opened the turn.
  Span next_header() const {
    return header_opened_ ? Span{header_.begin, header_.begin, header_.provenance} : header_;
  }
  Budget budget_;
  TokenArena arena_;
  Span header_, instruction_, resume_prefix_, resume_suffix_, marker_;
  std::vector<Span> prefix_;  // system + user, or system + resume(summary)
  Span system_;
  std::vector<Step> steps_;
  std::vector<Span> step_spans_;
  int64_t window_tokens_ = 0;
  int compactions_ = 0;
  bool window_has_action_ = false;
  bool compaction_requested_ = false;
  bool header_opened_ = false;  // the last observation opened the next turn (append_observation)
};

}  // namespace crl
