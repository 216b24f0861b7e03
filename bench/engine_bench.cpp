// Engine benchmarks (issue 2): context append + compaction rebuild against memcpy of the same bytes, the
// event kernel's events/s against a plain binary heap, at several sizes, and the check every finished
// episode's trajectory passes (Trajectory::validate) against one plain pass over its masks. Run:
// build/bench/bench_engine.
#include <benchmark/benchmark.h>

#include <cstring>
#include <queue>
#include <vector>

#include "engine/context.h"
#include "engine/event_kernel.h"
#include "engine/rng.h"
#include "engine/trajectory.h"

namespace crl {
namespace {

constexpr int kActionTokens = 32;
constexpr int kObservationTokens = 96;

Budget big_budget(int64_t tokens) {
  Budget b;
  b.capacity = tokens * 2 + 4096;
  b.reserve = 1024;
  b.per_turn_cap = 512;
  b.summary_cap = 512;
  b.max_compactions = 1 << 20;
  return b;
}

ContextTemplate bench_template() {
  return ContextTemplate{std::vector<TokenId>(4, 1), std::vector<TokenId>(64, 2), std::vector<TokenId>(32, 3),
                         std::vector<TokenId>(2, 4), std::vector<TokenId>(8, 5)};
}

// Starts an episode and appends atomic steps (32 action + 96 observation tokens) until the context holds
// `tokens` tokens.
void fill_window(Context& context, int64_t tokens) {
  static const std::vector<TokenId> system(256, 7), action(kActionTokens, 8),
      observation(kObservationTokens, 9);
  context.start(system, {});
  context.reserve(tokens + 1024);
  while (context.tokens() < tokens) {
    context.append_action(action, Provenance::kSampled);
    context.append_observation(observation);
  }
}

// One full window: append atomic steps until the context holds `tokens` tokens, build the summary request,
// rebuild from a 64-token summary. Items are context tokens; bytes are those tokens' bytes.
void BM_ContextAppendAndRebuild(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  const std::vector<TokenId> summary(64, 10);
  Context context(big_budget(tokens), bench_template());
  for (auto _ : state) {
    fill_window(context, tokens);
    PromptView prompt;
    benchmark::DoNotOptimize(context.summary_prompt(prompt));
    benchmark::DoNotOptimize(context.rebuild(summary));
  }
  state.SetItemsProcessed(state.iterations() * tokens);
  state.SetBytesProcessed(state.iterations() * tokens * static_cast<int64_t>(sizeof(TokenId)));
}
BENCHMARK(BM_ContextAppendAndRebuild)->Arg(4096)->Arg(65536)->Arg(1 << 20);

// The same window, plus materializing the summary request as one contiguous id array (what an LLM client
// sends): the copy every engine must make at least once.
void BM_ContextAppendRebuildMaterialize(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  const std::vector<TokenId> summary(64, 10);
  Context context(big_budget(tokens), bench_template());
  std::vector<TokenId> ids;
  ids.reserve(tokens + 4096);
  for (auto _ : state) {
    fill_window(context, tokens);
    PromptView prompt;
    context.summary_prompt(prompt);
    ids.clear();
    prompt.copy_to(ids);
    benchmark::DoNotOptimize(ids.data());
    benchmark::DoNotOptimize(context.rebuild(summary));
  }
  state.SetItemsProcessed(state.iterations() * tokens);
  state.SetBytesProcessed(state.iterations() * tokens * static_cast<int64_t>(sizeof(TokenId)));
}
BENCHMARK(BM_ContextAppendRebuildMaterialize)->Arg(4096)->Arg(65536)->Arg(1 << 20);

// The rebuild alone, on a window already filled (the compaction step itself): O(resume + kept spans).
void BM_ContextRebuildOnly(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  const std::vector<TokenId> summary(64, 10);
  Context context(big_budget(tokens), bench_template());
  for (auto _ : state) {
    state.PauseTiming();
    fill_window(context, tokens);
    state.ResumeTiming();
    benchmark::DoNotOptimize(context.rebuild(summary));
  }
  state.SetItemsProcessed(state.iterations() * tokens);
}
BENCHMARK(BM_ContextRebuildOnly)->Arg(4096)->Arg(65536)->Arg(1 << 20);

// The physical limit: one memcpy of the same bytes into a buffer that is already allocated.
void BM_MemcpyBaseline(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  const std::vector<TokenId> source(tokens, 7);
  std::vector<TokenId> target(tokens);
  for (auto _ : state) {
    std::memcpy(target.data(), source.data(), tokens * sizeof(TokenId));
    benchmark::DoNotOptimize(target.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * tokens);
  state.SetBytesProcessed(state.iterations() * tokens * static_cast<int64_t>(sizeof(TokenId)));
}
BENCHMARK(BM_MemcpyBaseline)->Arg(4096)->Arg(65536)->Arg(1 << 20);

// A trajectory of one segment whose response has `tokens` tokens, two thirds of them sampled (a rollout's
// actions between observations).
Trajectory trajectory_of(int64_t tokens) {
  Trajectory t;
  t.rollout_id = "bench";
  Segment& s = t.segments.emplace_back();
  s.prompt_ids.assign(1024, 7);
  s.prompt_provenance.assign(1024, Provenance::kPrompt);
  for (int64_t i = 0; i < tokens; ++i) {
    const bool sampled = i % 3 != 0;
    s.response_ids.push_back(8);
    s.response_provenance.push_back(sampled ? Provenance::kSampled : Provenance::kEnvironment);
    s.actor_mask.push_back(sampled ? 1 : 0);
    s.critic_mask.push_back(sampled ? 1 : 0);
    s.logprobs.push_back(sampled ? -0.5f : 0.0f);
    s.values.push_back(0.0f);
    s.n_sampled += sampled ? 1 : 0;
  }
  return t;
}

// Trajectory::validate (lengths, masks against provenance, n_s, N_after) on a finished episode.
void BM_TrajectoryValidate(benchmark::State& state) {
  const Trajectory t = trajectory_of(state.range(0));
  for (auto _ : state) t.validate();
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_TrajectoryValidate)->Arg(1024)->Arg(65536);

// The floor of any such check: one pass that sums the actor mask.
void BM_MaskSumBaseline(benchmark::State& state) {
  const Trajectory t = trajectory_of(state.range(0));
  for (auto _ : state) {
    int64_t sum = 0;
    for (const uint8_t m : t.segments[0].actor_mask) sum += m;
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_MaskSumBaseline)->Arg(1024)->Arg(65536);

// Event kernel "hold" model: `pending` events in flight; each processed event schedules one more at a
// random future time, so the pending count stays constant.
class Holder : public Process {
 public:
  explicit Holder(const std::vector<SimTime>& delays) : delays_(delays) {}
  void wake(EventKernel& kernel, uint64_t) override {
    kernel.schedule_after(delays_[next_++ & (delays_.size() - 1)], *this);
  }

 private:
  const std::vector<SimTime>& delays_;
  size_t next_ = 0;
};

std::vector<SimTime> random_delays() {
  Rng rng(StreamKey{1, 0, 0, StreamRole::kSimulation, 0});
  std::vector<SimTime> delays(1 << 16);
  for (SimTime& d : delays) d = 1 + rng.uniform_int(1000000);
  return delays;
}

void BM_EventKernelHold(benchmark::State& state) {
  const int64_t pending = state.range(0);
  const std::vector<SimTime> delays = random_delays();
  Holder holder(delays);
  EventKernel kernel;
  for (int64_t i = 0; i < pending; ++i) kernel.schedule_at(delays[i & (delays.size() - 1)], holder);
  for (int i = 0; i < 1000; ++i) kernel.step();  // warm-up
  for (auto _ : state) kernel.step();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventKernelHold)->Arg(100)->Arg(10000)->Arg(1000000);

// Baseline: the same hold pattern on std::priority_queue of (time, sequence) pairs, with no process
// dispatch, no slots and no cancellation support.
void BM_PriorityQueueHoldBaseline(benchmark::State& state) {
  const int64_t pending = state.range(0);
  const std::vector<SimTime> delays = random_delays();
  using Entry = std::pair<SimTime, uint64_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  uint64_t sequence = 0;
  size_t next = 0;
  for (int64_t i = 0; i < pending; ++i) queue.emplace(delays[i & (delays.size() - 1)], sequence++);
  for (auto _ : state) {
    const SimTime now = queue.top().first;
    queue.pop();
    queue.emplace(now + delays[next++ & (delays.size() - 1)], sequence++);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PriorityQueueHoldBaseline)->Arg(100)->Arg(10000)->Arg(1000000);

}  // namespace
}  // namespace crl
