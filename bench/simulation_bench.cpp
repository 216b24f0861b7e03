// The discrete-event rollout simulation (engine/sim/, issue 9): simulated events per second per core with
// stubbed policies (traces made up front, no episode runs), against the bare event kernel in the same run.
//
//  * BM_SimulationSyncRollouts/<concurrency>: run_schedule() over a simulated inference server, synchronous
//    batches; rollouts of 24 calls (one summary call every 8 turns, growing contexts, environment time).
//    Items = kernel events (server steps, environment waits, training steps); counters: simulated policy
//    calls and tokens per second.
//  * BM_SimulationAsyncRollouts/<concurrency>: the same with the bounded-staleness scheduler.
//  * BM_SimulationBaselineKernelOnly/<pending>: the floor: the same kernel processing no-op events
//    (each event schedules the next of its process), i.e. the cost of the heap and dispatch alone.
#include <benchmark/benchmark.h>

#include <deque>

#include "engine/event_kernel.h"
#include "engine/sim/rollout_scheduler.h"

namespace crl::sim {
namespace {

RolloutTrace stub_trace(int64_t i) {
  RolloutTrace t;
  int64_t context = 600 + (i % 7) * 50;
  for (int k = 0; k < 24; ++k) {
    SimCall c;
    c.prompt_tokens = context;
    c.shared_prefix_tokens = k == 0 ? 0 : context - 80;
    c.output_tokens = 16 + (i * 13 + k * 7) % 48;
    c.env_ns = 50'000'000;
    t.calls.push_back(c);
    context += c.output_tokens + 80;
    if (k % 8 == 7) {
      SimCall s;
      s.kind = CallKind::kSummarize;
      s.prompt_tokens = context + 60;
      s.shared_prefix_tokens = context;
      s.output_tokens = 128;
      t.calls.push_back(s);
      context = 400;
      ++t.compactions;
    }
  }
  t.turns = 24;
  t.reward = 1.0;
  return t;
}

void run_rollouts(benchmark::State& state, SchedulerMode mode) {
  ScheduleOptions o;
  o.mode = mode;
  o.concurrency = state.range(0);
  o.batch_size = state.range(0);
  o.train_steps = 4;
  o.train_seconds_per_token = 2.5e-5;
  std::deque<RolloutTrace> traces;
  const auto trace = [&](int64_t i) -> const RolloutTrace& {
    while (static_cast<int64_t>(traces.size()) <= i)
      traces.push_back(stub_trace(static_cast<int64_t>(traces.size())));
    return traces[i];
  };
  run_schedule(ServerProfile::h200_30b_a3b(), o, trace);  // warm-up: make the traces
  uint64_t events = 0;
  double calls = 0, tokens = 0;
  for (auto _ : state) {
    const ScheduleResult r = run_schedule(ServerProfile::h200_30b_a3b(), o, trace);
    events += r.events;
    calls += static_cast<double>(r.server.requests);
    tokens += static_cast<double>(r.server.output_tokens + r.server.prefill_tokens);
    benchmark::DoNotOptimize(r.end);
  }
  state.SetItemsProcessed(static_cast<int64_t>(events));
  // Simulated policy calls and tokens (prefilled + decoded) per CPU second.
  state.counters["calls_per_s"] = benchmark::Counter(calls, benchmark::Counter::kIsRate);
  state.counters["tokens_per_s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
}

void BM_SimulationSyncRollouts(benchmark::State& state) {
  run_rollouts(state, SchedulerMode::kSync);
}
BENCHMARK(BM_SimulationSyncRollouts)->Arg(16)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond);

void BM_SimulationAsyncRollouts(benchmark::State& state) {
  run_rollouts(state, SchedulerMode::kAsync);
}
BENCHMARK(BM_SimulationAsyncRollouts)->Arg(64)->Unit(benchmark::kMillisecond);

// Each wake schedules the process's next event a little later, so `pending` events stay in the heap.
class Ticker final : public Process {
 public:
  void wake(EventKernel& kernel, uint64_t tag) override {
    if (remaining_ == 0) return;
    --remaining_;
    kernel.schedule_after(1000 + static_cast<SimTime>(tag % 997), *this, tag * 6364136223846793005ULL + 1);
  }
  uint64_t remaining_ = 0;
};

void BM_SimulationBaselineKernelOnly(benchmark::State& state) {
  const int64_t pending = state.range(0);
  constexpr uint64_t kEvents = 1 << 20;
  uint64_t events = 0;
  for (auto _ : state) {
    EventKernel kernel;
    Ticker ticker;
    ticker.remaining_ = kEvents;
    for (int64_t i = 0; i < pending; ++i) kernel.schedule_after(i, ticker, static_cast<uint64_t>(i));
    kernel.run();
    events += kernel.processed();
  }
  state.SetItemsProcessed(static_cast<int64_t>(events));
}
BENCHMARK(BM_SimulationBaselineKernelOnly)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace crl::sim
