#include "engine/sim/rollout_scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <sstream>

#include "engine/error.h"

namespace crl::sim {

const char* scheduler_name(SchedulerMode mode) {
  switch (mode) {
    case SchedulerMode::kSync:
      return "sync";
    case SchedulerMode::kAsync:
      return "async";
    case SchedulerMode::kPartial:
      return "partial";
  }
  return "?";
}

void ScheduleOptions::validate(const std::string& where) const {
  auto at_least = [&](int64_t v, int64_t low, const char* field) {
    if (v < low)
      throw Error(where, field, "value " + std::to_string(v) + " must be >= " + std::to_string(low));
  };
  at_least(batch_size, 1, "batch_size");
  at_least(train_steps, 1, "train_steps");
  at_least(concurrency, 1, "concurrency");
  at_least(max_staleness, 0, "max_staleness");
  if (!(std::isfinite(train_seconds_per_token) && train_seconds_per_token >= 0.0)) {
    throw Error(where, "train_seconds_per_token", "must be >= 0");
  }
  if (!(std::isfinite(train_overhead_seconds) && train_overhead_seconds >= 0.0)) {
    throw Error(where, "train_overhead_seconds", "must be >= 0");
  }
}

namespace {

constexpr uint64_t kEnvDone = 1;
constexpr uint64_t kTrainDone = 2;
constexpr int kKindShift = 56;

uint64_t make_tag(uint64_t kind, int64_t index) {
  return (kind << kKindShift) | static_cast<uint64_t>(index);
}

class Scheduler final : public Process, public ServerListener {
 public:
  Scheduler(const ServerProfile& server, const ScheduleOptions& options,
            const std::function<const RolloutTrace&(int64_t)>& traces)
      : options_(options), traces_(traces), server_(server, *this) {}

  ScheduleResult run() {
    start_batch();
    while (!stopped_ && kernel_.step()) {
    }
    ScheduleResult result;
    result.rollouts = std::move(records_);
    result.batches = std::move(batches_);
    result.server = server_.stats();
    result.end = kernel_.now();
    result.events = kernel_.processed();
    result.discarded = discarded_;
    result.max_staleness_seen = max_staleness_;
    result.train_seconds = train_seconds_;
    return result;
  }

  void wake(EventKernel& kernel, uint64_t tag) override {
    if (stopped_) return;
    const uint64_t kind = tag >> kKindShift;
    const int64_t index = static_cast<int64_t>(tag & ((uint64_t{1} << kKindShift) - 1));
    if (kind == kEnvDone) {
      if (next_call_[index] < trace(index).calls.size()) {
        send_call(index);
      } else {
        finish(index);
      }
    } else if (kind == kTrainDone) {
      train_done(kernel);
    }
  }

  void on_complete(EventKernel& kernel, const ServerCompletion& c) override {
    if (stopped_) return;
    const int64_t i = static_cast<int64_t>(c.tag);
    RolloutRecord& r = records_[i];
    const SimCall& call = trace(i).calls[next_call_[i]];
    r.queue_ns += c.admitted - c.submitted;
    const SimTime served = c.finished - c.admitted;
    r.preemptions += c.preemptions;
    r.gpu_seconds += c.gpu_seconds;
    r.prompt_tokens += c.prompt_tokens;
    r.cache_hit_tokens += c.cache_hit_tokens;
    r.prefill_tokens += c.prefill_tokens;
    r.output_tokens += c.output_tokens;
    if (call.kind == CallKind::kSummarize) {
      r.summary_ns += served;
      r.summary_gpu_seconds += c.gpu_seconds;
      r.summary_tokens += c.prefill_tokens + c.output_tokens;
    } else {
      r.execute_ns += served;
    }
    if (call.after_compaction) r.reprefill_tokens += c.prefill_tokens;
    r.env_ns += call.env_ns;
    ++next_call_[i];
    kernel.schedule_after(call.env_ns, *this, make_tag(kEnvDone, i));
  }

 private:
  const RolloutTrace& trace(int64_t i) const { return *trace_ptr_[i]; }

  void launch() {
    const int64_t i = static_cast<int64_t>(records_.size());
    trace_ptr_.push_back(&traces_(i));
    next_call_.push_back(0);
    pause_started_.push_back(-1);
    RolloutRecord r;
    r.index = i;
    r.launched = kernel_.now();
    r.version_at_launch = version_;
    const RolloutTrace& t = trace(i);
    r.calls = static_cast<int>(t.calls.size());
    r.turns = t.turns;
    r.compactions = t.compactions;
    r.reward = t.reward;
    records_.push_back(r);
    ++in_flight_;
    in_flight_list_.push_back(i);
    if (t.calls.empty()) {
      kernel_.schedule_after(0, *this, make_tag(kEnvDone, i));
    } else {
      send_call(i);
    }
  }

  void send_call(int64_t i) {
    if (options_.mode == SchedulerMode::kPartial && training_) {
      // Partial rollouts pause while the trainer runs; they resume under the new version.
      pause_started_[i] = kernel_.now();
      paused_.push_back(i);
      return;
    }
    const SimCall& call = trace(i).calls[next_call_[i]];
    ServerRequest request;
    request.client = static_cast<uint64_t>(i);
    request.tag = static_cast<uint64_t>(i);
    request.prompt_tokens = call.prompt_tokens;
    request.shared_prefix_tokens = call.shared_prefix_tokens;
    request.output_tokens = call.output_tokens;
    server_.submit(kernel_, request);
  }

  void finish(int64_t i) {
    records_[i].finished = kernel_.now();
    --in_flight_;
    in_flight_list_.erase(std::find(in_flight_list_.begin(), in_flight_list_.end(), i));
    switch (options_.mode) {
      case SchedulerMode::kSync:
        ++batch_finished_;
        if (static_cast<int64_t>(records_.size()) < batch_end_) launch();
        if (batch_finished_ == options_.batch_size) {
          std::vector<int64_t> batch;
          for (int64_t j = batch_end_ - options_.batch_size; j < batch_end_; ++j) batch.push_back(j);
          start_training(batch);
        }
        break;
      case SchedulerMode::kAsync:
        ready_.push_back(i);
        try_train_async();
        try_launch();
        break;
      case SchedulerMode::kPartial:
        ready_.push_back(i);
        if (!training_ && static_cast<int64_t>(ready_.size()) >= options_.batch_size) take_first_ready();
        try_launch();
        break;
    }
  }

  void take_first_ready() {
    std::vector<int64_t> batch(ready_.begin(), ready_.begin() + options_.batch_size);
    ready_.erase(ready_.begin(), ready_.begin() + options_.batch_size);
    start_training(batch);
  }

  void try_train_async() {
    if (training_) return;
    // Drop finished rollouts that are already too stale for the next step; they are never trained.
    for (auto it = ready_.begin(); it != ready_.end();) {
      if (version_ - records_[*it].version_at_launch > options_.max_staleness) {
        records_[*it].discarded = true;
        ++discarded_;
        it = ready_.erase(it);
      } else {
        ++it;
      }
    }
    if (static_cast<int64_t>(ready_.size()) >= options_.batch_size) take_first_ready();
  }

  void try_launch() {
    if (stopped_) return;
    if (options_.mode == SchedulerMode::kAsync) {
      // AReaL's bound: at most (version + s + 1) x B rollouts launched (discarded ones not counted), so no
      // trained rollout can be more than s versions old.
      while (in_flight_ < options_.concurrency &&
             static_cast<int64_t>(records_.size()) - discarded_ <
                 (version_ + options_.max_staleness + 1) * options_.batch_size) {
        launch();
      }
    } else if (options_.mode == SchedulerMode::kPartial) {
      while (!training_ && in_flight_ < options_.concurrency) launch();
    }
  }

  void start_batch() {
    batch_started_ = kernel_.now();
    if (options_.mode == SchedulerMode::kSync) {
      batch_end_ = static_cast<int64_t>(records_.size()) + options_.batch_size;
      batch_finished_ = 0;
      while (in_flight_ < options_.concurrency && static_cast<int64_t>(records_.size()) < batch_end_)
        launch();
    } else {
      try_launch();
    }
  }

  void start_training(const std::vector<int64_t>& batch) {
    BatchRecord b;
    b.step = version_;
    b.started = batch_started_;
    b.rollouts_ready = kernel_.now();
    for (int64_t i : batch) {
      RolloutRecord& r = records_[i];
      r.consumed_by_step = version_;
      r.staleness = version_ - r.version_at_launch;
      max_staleness_ = std::max(max_staleness_, r.staleness);
      b.train_tokens += trace(i).train_tokens();
    }
    if (options_.mode == SchedulerMode::kPartial) {
      for (int64_t i : in_flight_list_) ++records_[i].versions_spanned;
    }
    const double seconds = options_.train_overhead_seconds +
                           options_.train_seconds_per_token * static_cast<double>(b.train_tokens);
    train_seconds_ += seconds;
    batches_.push_back(b);
    training_ = true;
    kernel_.schedule_after(static_cast<SimTime>(std::llround(seconds * 1e9)), *this, make_tag(kTrainDone, 0));
  }

  void train_done(EventKernel& kernel) {
    batches_.back().trained = kernel.now();
    training_ = false;
    ++version_;
    if (version_ >= options_.train_steps) {
      stopped_ = true;
      return;
    }
    switch (options_.mode) {
      case SchedulerMode::kSync:
        start_batch();
        break;
      case SchedulerMode::kAsync:
        batch_started_ = kernel.now();
        try_train_async();
        try_launch();
        break;
      case SchedulerMode::kPartial: {
        batch_started_ = kernel.now();
        std::vector<int64_t> resume;
        resume.swap(paused_);
        for (int64_t i : resume) {
          records_[i].paused_ns += kernel.now() - pause_started_[i];
          send_call(i);
        }
        if (static_cast<int64_t>(ready_.size()) >= options_.batch_size) take_first_ready();
        try_launch();
        break;
      }
    }
  }

  ScheduleOptions options_;
  const std::function<const RolloutTrace&(int64_t)>& traces_;
  EventKernel kernel_;
  InferenceServer server_;
  std::vector<RolloutRecord> records_;
  std::vector<const RolloutTrace*> trace_ptr_;
  std::vector<size_t> next_call_;
  std::vector<SimTime> pause_started_;
  std::vector<int64_t> in_flight_list_;  // launch order
  std::vector<int64_t> paused_;
  std::deque<int64_t> ready_;  // finished, not yet trained, in finishing order
  std::vector<BatchRecord> batches_;
  int64_t in_flight_ = 0;
  int64_t version_ = 0;
  int64_t batch_end_ = 0, batch_finished_ = 0;
  SimTime batch_started_ = 0;
  int64_t discarded_ = 0, max_staleness_ = 0;
  double train_seconds_ = 0.0;
  bool training_ = false;
  bool stopped_ = false;
};

std::string seconds_text(SimTime ns) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.3f s", static_cast<double>(ns) * 1e-9);
  return buffer;
}

}  // namespace

ScheduleResult run_schedule(const ServerProfile& server, const ScheduleOptions& options,
                            const std::function<const RolloutTrace&(int64_t index)>& traces) {
  options.validate("schedule");
  Scheduler scheduler(server, options, traces);
  return scheduler.run();
}

std::vector<const RolloutRecord*> stragglers(const ScheduleResult& result, size_t count) {
  std::vector<const RolloutRecord*> trained;
  for (const RolloutRecord& r : result.rollouts) {
    if (r.consumed_by_step >= 0) trained.push_back(&r);
  }
  std::stable_sort(trained.begin(), trained.end(), [](const RolloutRecord* a, const RolloutRecord* b) {
    return a->wall_ns() > b->wall_ns();
  });
  if (trained.size() > count) trained.resize(count);
  return trained;
}

std::string format_stragglers(const ScheduleResult& result, size_t count) {
  std::ostringstream out;
  for (const RolloutRecord* r : stragglers(result, count)) {
    out << "rollout " << r->index << ": " << seconds_text(r->wall_ns()) << " (" << r->turns << " turns, "
        << r->compactions << " compactions; queueing " << seconds_text(r->queue_ns) << ", execution calls "
        << seconds_text(r->execute_ns) << ", summary calls " << seconds_text(r->summary_ns)
        << ", environment " << seconds_text(r->env_ns);
    if (r->paused_ns > 0) out << ", paused for training " << seconds_text(r->paused_ns);
    if (r->preemptions > 0) out << ", " << r->preemptions << " preemptions";
    out << ")\n";
  }
  return out.str();
}

}  // namespace crl::sim
