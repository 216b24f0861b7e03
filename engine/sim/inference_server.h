#pragma once
// A simulated LLM inference server (continuous batching, as vLLM and SGLang do it) as a process of the event
// kernel. It answers requests of known size (prompt tokens, tokens shared with the client's previous
// sequence, tokens to decode) with simulated latency; it never computes a token.
//
// The model, one engine iteration ("step") at a time:
//  * Admission, at the start of each step: waiting requests in FIFO order while fewer than `max_running`
//    sequences run and the KV cache has room for the request's whole prompt. Idle prefix-cache entries are
//    evicted (least recently used first) to make room; a request that does not fit waits (queueing). When
//    nothing runs, the head request is admitted whatever its size (the scenario checks that one sequence
//    fits the budget).
//  * Prefix cache: after a request finishes, its whole sequence (prompt + output) stays in the KV cache as
//    the client's entry until evicted. The next request of the same client reuses min(its shared prefix,
//    the entry) tokens: an unchanged history hits, a context rebuilt after compaction shares only its
//    system prompt with the entry and misses the rest. One entry per client (no sharing across clients).
//  * Chunked prefill: each step computes at most `max_prefill_tokens_per_step` prompt tokens over the
//    admitted sequences in admission order; the chunk that completes a prompt also yields its first output
//    token. Sequences whose prompt is done decode one token per step.
//  * Step time = decode_base + decode_per_seq * (decoding sequences) + decode_per_kv_token * (KV tokens those
//    sequences read) + (prompt tokens computed) / prefill_tokens_per_s. A bigger batch makes each step slower
//    but yields more tokens per second in total (the batch-size-dependent decode speed).
//  * Preemption: when the decoded tokens push the KV cache over its budget, idle cache entries are evicted
//    first; then the most recently admitted running sequence is preempted in recompute mode (vLLM's
//    default): its KV is freed and it goes back to the head of the queue, to prefill its prompt and the
//    tokens it had generated again.
//  * GPU time: each step's duration is split over the sequences in it (the base equally, the per-sequence
//    and KV terms to the decoding ones, the prefill term by prompt tokens computed), so the GPU-seconds of
//    all requests add up to the server's busy time.
// Time is integer nanoseconds; all arithmetic is in a fixed order, so a run is a pure function of the
// requests and their submission times.
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/event_kernel.h"

namespace crl::sim {

// Capacity and speed of one inference server. The defaults (h200_30b_a3b()) and their sources are in
// engine/sim/README.md.
struct ServerProfile {
  std::string name = "h200-30b-a3b";
  int64_t max_running = 256;          // concurrent sequences
  int64_t kv_budget_tokens = 600000;  // KV-cache capacity in tokens
  int64_t max_prefill_tokens_per_step = 8192;
  double prefill_tokens_per_s = 40000.0;
  double decode_base_ms = 6.4;           // fixed cost of a step
  double decode_per_seq_ms = 0.1;        // each decoding sequence adds this
  double decode_per_kv_token_ns = 20.0;  // each KV token a decoding sequence reads adds this
  bool prefix_cache = true;

  // The documented default: a 30B-A3B MoE model (Qwen3-30B-A3B / GLM-4.7-Flash class) in BF16 on one
  // H200-class GPU (141 GB HBM3e, 4.8 TB/s).
  static ServerProfile h200_30b_a3b() { return ServerProfile{}; }
  // Throws crl::Error naming `where` and the field for a value out of range.
  void validate(const std::string& where) const;
  // Duration of one step in seconds.
  double step_seconds(int64_t decoding, int64_t decode_kv_tokens, int64_t prefill_tokens) const;
};

struct ServerRequest {
  uint64_t client = 0;               // the rollout: prefix-cache entries are per client
  uint64_t tag = 0;                  // handed back in the completion
  int64_t prompt_tokens = 0;         // >= 1
  int64_t shared_prefix_tokens = 0;  // leading prompt tokens equal to the client's previous sequence
  int64_t output_tokens = 0;         // tokens to decode (the trace knows them)
};

struct ServerCompletion {
  uint64_t client = 0;
  uint64_t tag = 0;
  SimTime submitted = 0;
  SimTime admitted = 0;  // first admission (queueing = admitted - submitted)
  SimTime finished = 0;
  int64_t prompt_tokens = 0;
  int64_t cache_hit_tokens = 0;  // prompt tokens served from the prefix cache (first admission)
  int64_t prefill_tokens = 0;    // prompt tokens computed, recomputation after preemption included
  int64_t output_tokens = 0;
  int preemptions = 0;
  double gpu_seconds = 0.0;
};

class ServerListener {
 public:
  virtual ~ServerListener() = default;
  // Called at the end of the step that produced the request's last token.
  virtual void on_complete(EventKernel& kernel, const ServerCompletion& completion) = 0;
};

struct ServerStats {
  int64_t steps = 0;
  int64_t requests = 0;
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0;
  int64_t cache_hit_tokens = 0;
  int64_t prefill_tokens = 0;
  int64_t output_tokens = 0;
  int64_t evicted_cache_tokens = 0;
  int64_t max_running_seen = 0;
  int64_t max_kv_used = 0;
  double busy_seconds = 0.0;
  int64_t max_queue = 0;
};

class InferenceServer final : public Process {
 public:
  InferenceServer(const ServerProfile& profile, ServerListener& listener);

  // Queues a request at kernel.now(); it is admitted at the next step boundary.
  void submit(EventKernel& kernel, const ServerRequest& request);
  void wake(EventKernel& kernel, uint64_t tag) override;

  const ServerProfile& profile() const { return profile_; }
  const ServerStats& stats() const { return stats_; }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t kv_used() const { return kv_running_ + kv_cached_; }
  // Tokens of `client` held in the prefix cache (0 when evicted or never cached).
  int64_t cached_tokens(uint64_t client) const;

 private:
  struct Sequence {
    ServerRequest request;
    ServerCompletion done;
    int64_t prompt = 0;  // tokens to have in KV before decoding (prompt + output so far after a preemption)
    int64_t prompt_ready = 0;  // of those, in KV now (cache hit + prefilled)
    int64_t generated = 0;     // output tokens so far
    int64_t kv = 0;            // KV tokens allocated to it (the prompt at admission, + each token decoded)
    bool admitted_once = false;
  };
  struct CacheEntry {
    int64_t tokens = 0;
    uint64_t last_use = 0;  // release counter: smaller = older
  };

  void start_step(EventKernel& kernel);
  void end_step(EventKernel& kernel);
  // Evicts idle cache entries, least recently used first, until `needed` more tokens fit; false if they
  // cannot.
  bool make_room(int64_t needed);
  void preempt_latest();

  ServerProfile profile_;
  ServerListener& listener_;
  std::deque<Sequence> waiting_;
  std::vector<Sequence> running_;
  std::unordered_map<uint64_t, CacheEntry> cache_;  // looked up by client only, never iterated for order
  int64_t kv_running_ = 0;
  int64_t kv_cached_ = 0;  // idle entries (evictable)
  uint64_t releases_ = 0;
  bool stepping_ = false;  // a step is scheduled or running
  ServerStats stats_;
  // Per-step scratch, kept to avoid allocation.
  std::vector<int64_t> step_prefill_;
  std::vector<ServerCompletion> finished_;
};

}  // namespace crl::sim
