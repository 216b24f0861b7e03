#include "engine/sim/inference_server.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "engine/error.h"

namespace crl::sim {

namespace {
constexpr uint64_t kStartStep = 0;
constexpr uint64_t kEndStep = 1;

SimTime to_ns(double seconds) {
  return static_cast<SimTime>(std::llround(seconds * 1e9));
}
}  // namespace

void ServerProfile::validate(const std::string& where) const {
  auto positive_int = [&](int64_t v, const char* field) {
    if (v < 1) throw Error(where, field, "value " + std::to_string(v) + " must be >= 1");
  };
  auto non_negative = [&](double v, const char* field, bool strictly) {
    if (!std::isfinite(v) || v < 0.0 || (strictly && v == 0.0)) {
      throw Error(where, field, "value " + std::to_string(v) + (strictly ? " must be > 0" : " must be >= 0"));
    }
  };
  positive_int(max_running, "max_running");
  positive_int(kv_budget_tokens, "kv_budget_tokens");
  positive_int(max_prefill_tokens_per_step, "max_prefill_tokens_per_step");
  non_negative(prefill_tokens_per_s, "prefill_tokens_per_s", true);
  non_negative(decode_base_ms, "decode_base_ms", false);
  non_negative(decode_per_seq_ms, "decode_per_seq_ms", false);
  non_negative(decode_per_kv_token_ns, "decode_per_kv_token_ns", false);
  if (decode_base_ms + decode_per_seq_ms == 0.0) {
    throw Error(where, "decode_base_ms",
                "decode_base_ms + decode_per_seq_ms must be > 0 (a step takes time)");
  }
}

double ServerProfile::step_seconds(int64_t decoding, int64_t decode_kv_tokens, int64_t prefill_tokens) const {
  return decode_base_ms * 1e-3 + decode_per_seq_ms * 1e-3 * static_cast<double>(decoding) +
         decode_per_kv_token_ns * 1e-9 * static_cast<double>(decode_kv_tokens) +
         static_cast<double>(prefill_tokens) / prefill_tokens_per_s;
}

InferenceServer::InferenceServer(const ServerProfile& profile, ServerListener& listener)
    : profile_(profile), listener_(listener) {
  profile_.validate("server profile");
}

int64_t InferenceServer::cached_tokens(uint64_t client) const {
  const auto it = cache_.find(client);
  return it == cache_.end() ? 0 : it->second.tokens;
}

void InferenceServer::submit(EventKernel& kernel, const ServerRequest& request) {
  CRL_CHECK(request.prompt_tokens >= 1, "a request needs a prompt: " << request.prompt_tokens);
  CRL_CHECK(request.output_tokens >= 0 && request.shared_prefix_tokens >= 0, "negative request sizes");
  Sequence s;
  s.request = request;
  s.prompt = request.prompt_tokens;
  s.done.client = request.client;
  s.done.tag = request.tag;
  s.done.submitted = kernel.now();
  s.done.prompt_tokens = request.prompt_tokens;
  s.done.output_tokens = request.output_tokens;
  waiting_.push_back(s);
  ++stats_.requests;
  stats_.prompt_tokens += request.prompt_tokens;
  stats_.max_queue = std::max(stats_.max_queue, static_cast<int64_t>(waiting_.size()));
  if (!stepping_) {
    // Start at a step boundary now, after every other submission at this instant (they join the batch).
    stepping_ = true;
    kernel.schedule_after(0, *this, kStartStep);
  }
}

void InferenceServer::wake(EventKernel& kernel, uint64_t tag) {
  if (tag == kEndStep) end_step(kernel);
  start_step(kernel);
}

bool InferenceServer::make_room(int64_t needed) {
  while (kv_running_ + kv_cached_ + needed > profile_.kv_budget_tokens) {
    // The least recently released idle entry (last_use values are unique, so the choice does not depend on
    // the map's iteration order).
    auto oldest = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (oldest == cache_.end() || it->second.last_use < oldest->second.last_use) oldest = it;
    }
    if (oldest == cache_.end()) return false;
    kv_cached_ -= oldest->second.tokens;
    stats_.evicted_cache_tokens += oldest->second.tokens;
    cache_.erase(oldest);
  }
  return true;
}

void InferenceServer::preempt_latest() {
  Sequence s = std::move(running_.back());
  running_.pop_back();
  kv_running_ -= s.kv;
  // Recompute mode: everything in KV is dropped; the prompt and the tokens generated so far are prefilled
  // again before decoding resumes.
  s.prompt = s.request.prompt_tokens + s.generated;
  s.prompt_ready = 0;
  s.kv = 0;
  ++s.done.preemptions;
  ++stats_.preemptions;
  waiting_.push_front(std::move(s));
}

void InferenceServer::start_step(EventKernel& kernel) {
  // Admission, FIFO: stop at the first request that does not fit (no overtaking).
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < profile_.max_running) {
    Sequence& s = waiting_.front();
    // The client's idle entry leaves the cache: its shared prefix becomes part of the sequence, the rest is
    // freed. If the request then does not fit, the entry goes back unchanged.
    int64_t hit = 0;
    std::optional<CacheEntry> entry;
    if (!s.admitted_once && profile_.prefix_cache) {
      if (const auto it = cache_.find(s.request.client); it != cache_.end()) {
        entry = it->second;
        hit =
            std::max<int64_t>(0, std::min({s.request.shared_prefix_tokens, it->second.tokens, s.prompt - 1}));
        kv_cached_ -= it->second.tokens;
        cache_.erase(it);
      }
    }
    if (!make_room(s.prompt) && !running_.empty()) {
      if (entry) {
        cache_[s.request.client] = *entry;
        kv_cached_ += entry->tokens;
      }
      break;
    }
    const int64_t needed = s.prompt;
    kv_running_ += needed;
    s.kv = s.prompt;
    s.prompt_ready = hit;
    if (!s.admitted_once) {
      s.admitted_once = true;
      s.done.admitted = kernel.now();
      s.done.cache_hit_tokens = hit;
      stats_.cache_hit_tokens += hit;
    }
    running_.push_back(std::move(s));
    waiting_.pop_front();
  }
  if (running_.empty()) {
    stepping_ = false;
    return;
  }
  stats_.max_running_seen = std::max(stats_.max_running_seen, static_cast<int64_t>(running_.size()));
  stats_.max_kv_used = std::max(stats_.max_kv_used, kv_used());

  // Plan the step: prefill chunks in admission order, one decoded token for every sequence whose prompt is
  // in KV.
  step_prefill_.assign(running_.size(), 0);
  int64_t budget = profile_.max_prefill_tokens_per_step, prefill = 0, decoding = 0, decode_kv = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence& s = running_[i];
    if (s.prompt_ready < s.prompt) {
      const int64_t chunk = std::min(budget, s.prompt - s.prompt_ready);
      step_prefill_[i] = chunk;
      budget -= chunk;
      prefill += chunk;
    } else {
      ++decoding;
      decode_kv += s.kv;
    }
  }
  const double seconds = profile_.step_seconds(decoding, decode_kv, prefill);
  // Attribute the step's GPU time: the base equally to every sequence taking part, the rest to whoever
  // causes it.
  int64_t taking_part = decoding;
  for (int64_t chunk : step_prefill_) taking_part += chunk > 0;
  const double base_share = taking_part > 0 ? profile_.decode_base_ms * 1e-3 / taking_part : 0.0;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = running_[i];
    if (step_prefill_[i] > 0) {
      s.done.gpu_seconds +=
          base_share + static_cast<double>(step_prefill_[i]) / profile_.prefill_tokens_per_s;
    } else if (s.prompt_ready == s.prompt) {
      s.done.gpu_seconds += base_share + profile_.decode_per_seq_ms * 1e-3 +
                            profile_.decode_per_kv_token_ns * 1e-9 * static_cast<double>(s.kv);
    }
  }
  stats_.busy_seconds += seconds;
  ++stats_.steps;
  kernel.schedule_after(to_ns(seconds), *this, kEndStep);
}

void InferenceServer::end_step(EventKernel& kernel) {
  finished_.clear();
  size_t kept = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = running_[i];
    bool emits = false;
    if (step_prefill_[i] > 0) {
      s.prompt_ready += step_prefill_[i];
      s.done.prefill_tokens += step_prefill_[i];
      stats_.prefill_tokens += step_prefill_[i];
      emits = s.prompt_ready == s.prompt;  // the chunk that completes the prompt yields a token
    } else if (s.prompt_ready == s.prompt) {
      emits = true;
    }
    if (emits && s.generated < s.request.output_tokens) {
      ++s.generated;
      ++s.kv;
      ++kv_running_;
    }
    if (s.prompt_ready == s.prompt && s.generated == s.request.output_tokens) {
      s.done.finished = kernel.now();
      finished_.push_back(s.done);
      stats_.output_tokens += s.generated;
      kv_running_ -= s.kv;
      if (profile_.prefix_cache) {
        // The whole sequence stays cached as the client's entry (replacing an older one, if any).
        const int64_t tokens = s.request.prompt_tokens + s.generated;
        if (const auto it = cache_.find(s.request.client); it != cache_.end())
          kv_cached_ -= it->second.tokens;
        cache_[s.request.client] = CacheEntry{tokens, releases_++};
        kv_cached_ += tokens;
      }
      continue;
    }
    if (kept != i) running_[kept] = std::move(s);
    ++kept;
  }
  running_.resize(kept);
  // Over budget after the decoded tokens: drop idle cache entries first, then preempt the latest admitted.
  if (kv_running_ + kv_cached_ > profile_.kv_budget_tokens) {
    make_room(0);
    while (kv_running_ > profile_.kv_budget_tokens && running_.size() > 1) preempt_latest();
  }
  // Listeners may submit at once; their requests wait for the next step boundary (stepping_ stays true).
  for (const ServerCompletion& c : finished_) listener_.on_complete(kernel, c);
}

}  // namespace crl::sim
