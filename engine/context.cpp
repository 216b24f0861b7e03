#include "engine/context.h"

#include <algorithm>

#include "engine/error.h"

namespace crl {

PromptView::PromptView(const TokenArena* arena, std::vector<Span> spans)
    : arena_(arena), spans_(std::move(spans)) {
  for (const Span& span : spans_) size_ += span.size();
}

void PromptView::assign(const TokenArena* arena, std::span<const Span> first, std::span<const Span> second,
                        Span last) {
  arena_ = arena;
  spans_.clear();
  // Grown geometrically: a gateway session's prompt gains spans every turn, and an exact reserve reallocated
  // (and freed a block of the heap's large sizes) on every call.
  const size_t needed = first.size() + second.size() + 1;
  if (spans_.capacity() < needed) spans_.reserve(std::max(needed, 2 * spans_.capacity()));
  spans_.insert(spans_.end(), first.begin(), first.end());
  spans_.insert(spans_.end(), second.begin(), second.end());
  spans_.push_back(last);
  size_ = 0;
  for (const Span& span : spans_) size_ += span.size();
}

TokenId PromptView::back() const {
  for (auto it = spans_.rbegin(); it != spans_.rend(); ++it) {
    if (it->size() > 0) return arena_->view(*it).back();
  }
  CRL_CHECK(false, "back() of an empty prompt");
}

void PromptView::copy_to(std::vector<TokenId>& ids, std::vector<Provenance>* provenance) const {
  ids.reserve(ids.size() + size_);
  for (const Span& span : spans_) {
    const auto tokens = arena_->view(span);
    ids.insert(ids.end(), tokens.begin(), tokens.end());
    if (provenance != nullptr) provenance->insert(provenance->end(), span.size(), span.provenance);
  }
}

Context::Context(const Budget& budget, const ContextTemplate& tmpl) : budget_(budget) {
  header_ = arena_.append(tmpl.turn_header, Provenance::kPrompt);
  instruction_ = arena_.append(tmpl.summary_instruction, Provenance::kPrompt);
  resume_prefix_ = arena_.append(tmpl.resume_prefix, Provenance::kPrompt);
  resume_suffix_ = arena_.append(tmpl.resume_suffix, Provenance::kPrompt);
  marker_ = arena_.append(tmpl.truncation_marker, Provenance::kPrompt);
}

bool Context::start(std::span<const TokenId> system, std::span<const TokenId> user, bool opens_turn) {
  arena_.truncate(marker_.end);  // keep the template tokens, forget the previous episode
  steps_.clear();
  step_spans_.clear();
  system_ = arena_.append(system, Provenance::kPrompt);
  prefix_ = {system_, arena_.append(user, Provenance::kPrompt)};
  window_tokens_ = system_.size() + prefix_[1].size();
  compactions_ = 0;
  window_has_action_ = false;
  compaction_requested_ = false;
  header_opened_ = opens_turn;
  return tokens() < budget_.capacity;
}

bool Context::needs_compaction() const {
  if (!window_has_action_) return false;
  return compaction_requested_ || budget_.capacity - tokens() < budget_.reserve;
}

int64_t Context::max_new_tokens() const {
  return std::min(budget_.per_turn_cap, budget_.capacity - tokens());
}

std::vector<Span> Context::window_spans() const {
  std::vector<Span> spans;
  spans.reserve(prefix_.size() + step_spans_.size() + 1);
  spans.insert(spans.end(), prefix_.begin(), prefix_.end());
  spans.insert(spans.end(), step_spans_.begin(), step_spans_.end());
  return spans;
}

PromptView Context::execution_prompt() const {
  PromptView out;
  execution_prompt(out);
  return out;
}

void Context::execution_prompt(PromptView& out) const {
  out.assign(&arena_, prefix_, step_spans_, next_header());
}

bool Context::summary_prompt(PromptView& prompt) const {
  // Which spans are observations (the only ones that may be cut): environment spans of the prefix, and in
  // each step every span after the turn header and the action.
  std::vector<Span> spans;
  std::vector<bool> shrinkable;
  for (const Span& span : prefix_) {
    spans.push_back(span);
    shrinkable.push_back(span.provenance == Provenance::kEnvironment);
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    for (size_t j = steps_[i].first_span; j < step_end(i); ++j) {
      spans.push_back(step_spans_[j]);
      shrinkable.push_back(j - steps_[i].first_span >= 2);
    }
  }
  spans.push_back(instruction_);
  shrinkable.push_back(false);
  int64_t total = window_tokens_ + instruction_.size();
  const int64_t limit = budget_.capacity - budget_.summary_cap;
  if (total <= limit) {
    prompt = PromptView(&arena_, std::move(spans));
    return true;
  }
  // Temporary truncation: halve the largest observation (earliest on ties) until the prompt fits. `kept[i]`
  // is how many tokens of spans[i] survive; a cut span shows its head third, the marker, its tail rest.
  std::vector<int64_t> kept(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) kept[i] = spans[i].size();
  std::vector<bool> cut(spans.size(), false);
  while (total > limit) {
    size_t best = spans.size();
    for (size_t i = 0; i < spans.size(); ++i) {
      if (shrinkable[i] && kept[i] >= 2 && (best == spans.size() || kept[i] > kept[best])) best = i;
    }
    if (best == spans.size()) return false;
    const int64_t new_kept = kept[best] / 2;
    total -= kept[best] - new_kept;
    if (!cut[best]) total += marker_.size();
    cut[best] = true;
    kept[best] = new_kept;
  }
  std::vector<Span> out;
  out.reserve(spans.size() + 8);
  for (size_t i = 0; i < spans.size(); ++i) {
    if (!cut[i]) {
      out.push_back(spans[i]);
      continue;
    }
    const int64_t head = kept[i] / 3, tail = kept[i] - head;
    out.push_back(Span{spans[i].begin, static_cast<uint32_t>(spans[i].begin + head), spans[i].provenance});
    out.push_back(marker_);
    out.push_back(Span{static_cast<uint32_t>(spans[i].end - tail), spans[i].end, spans[i].provenance});
  }
  prompt = PromptView(&arena_, std::move(out));
  return true;
}

int64_t Context::summary_max_new_tokens(const PromptView& prompt) const {
  return std::min(budget_.summary_cap, budget_.capacity - prompt.size());
}

void Context::append_action(std::span<const TokenId> action, Provenance provenance) {
  CRL_CHECK(provenance == Provenance::kSampled || provenance == Provenance::kForced,
            "an action is sampled or forced, not " << provenance_name(provenance));
  // Every step opens with a header span, an empty one when an observation opened the turn: the spans after
  // the first two of a step are its observations (summary_prompt).
  const Span header = next_header();
  const Step step{step_spans_.size(), static_cast<int64_t>(header.size() + action.size())};
  step_spans_.push_back(header);
  step_spans_.push_back(arena_.append(action, provenance));
  window_tokens_ += step.tokens;
  steps_.push_back(step);
  window_has_action_ = true;
  header_opened_ = false;
}

void Context::append_observation(std::span<const TokenId> observation, bool opens_turn) {
  if (observation.empty()) return;
  header_opened_ = opens_turn;
  const Span span = arena_.append(observation, Provenance::kEnvironment);
  window_tokens_ += span.size();
  if (steps_.empty()) {
    prefix_.push_back(span);
  } else {
    step_spans_.push_back(span);
    steps_.back().tokens += span.size();
  }
}

RebuildResult Context::rebuild(std::span<const TokenId> summary) {
  ++compactions_;
  compaction_requested_ = false;
  const Span copied = arena_.append(summary, Provenance::kCopiedSummary);
  const int64_t base = system_.size() + resume_prefix_.size() + copied.size() + resume_suffix_.size();
  const int64_t limit = budget_.capacity - budget_.reserve;
  // The next turn's header: none when the kept tail ends with an observation that opened the turn; the
  // resume turn alone (k = 0) is followed by the template's.
  const auto header_after = [&](int k) { return k > 0 && header_opened_ ? 0 : header_.size(); };
  // The first kept step gets the template's header back when an observation of a dropped step had opened
  // its turn (its header span is empty): the resume turn does not open it.
  const auto reopened = [&](int k) {
    return k > 0 && step_spans_[steps_[steps_.size() - k].first_span].size() == 0 ? header_.size() : 0;
  };
  // k = tail_k, tail_k - 1, ..., 0: keep the first that fits strictly below C - T_comp.
  int k = std::min<int>(budget_.tail_k, static_cast<int>(steps_.size()));
  for (; k >= 0; --k) {
    int64_t tail = 0;
    for (size_t i = steps_.size() - k; i < steps_.size(); ++i) tail += steps_[i].tokens;
    if (base + header_after(k) + reopened(k) + tail < limit) break;
  }
  if (k < 0) return RebuildResult{RebuildStatus::kDoesNotFit, 0};
  if (k == 0) header_opened_ = false;
  if (reopened(k) > 0) {
    Step& first = steps_[steps_.size() - k];
    step_spans_[first.first_span] = header_;
    first.tokens += header_.size();
  }
  prefix_ = {system_, resume_prefix_, copied, resume_suffix_};
  const size_t kept_from = steps_.size() - k;
  const size_t first_kept_span = k > 0 ? steps_[kept_from].first_span : step_spans_.size();
  steps_.erase(steps_.begin(), steps_.begin() + kept_from);
  step_spans_.erase(step_spans_.begin(), step_spans_.begin() + first_kept_span);
  for (Step& step : steps_) step.first_span -= first_kept_span;
  for (Span& span : step_spans_) span.provenance = Provenance::kCopiedTail;
  window_tokens_ = base;
  for (const Step& step : steps_) window_tokens_ += step.tokens;
  window_has_action_ = false;
  return RebuildResult{RebuildStatus::kRebuilt, k};
}

}  // namespace crl
