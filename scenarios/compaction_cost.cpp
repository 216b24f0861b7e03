// Running the compaction-cost study (scenarios/compaction_cost.h): traces from real episodes, replayed
// through the simulated inference server and rollout schedulers, measured per strategy. Parsing is in
// compaction_cost_spec.cpp, the report and tables in compaction_cost_report.cpp.
#include "scenarios/compaction_cost.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>

#include "engine/file_io.h"
#include "engine/runner.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "policies/policy.h"
#include "scenarios/compaction_cost_retention.h"
#include "scenarios/report.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"

namespace crl::scenarios {

namespace {

// ---------------------------------------------------------------------------------------------------------
// Traces from real episodes.

// The executor for execution calls; for summary calls the executor's summary, of which a frozen or learned
// summarizer keeps each line (text view) or symbol (symbolic view) with probability keep_rate, drawn from
// the request's own stream (so the same summary request always loses the same facts).
class StubSummarizer final : public Policy {
 public:
  StubSummarizer(const Policy& executor, std::shared_ptr<const Codec> codec, const SummarizerSpec& spec)
      : executor_(executor), codec_(std::move(codec)), spec_(spec) {}
  std::string name() const override { return "stub_summarizer(" + spec_.name + ")"; }

  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override {
    executor_.act(requests, decisions);
    if (spec_.kind != SummarizerKind::kFrozen && spec_.kind != SummarizerKind::kLearned) return;
    for (size_t i = 0; i < requests.size(); ++i) {
      const Request& request = *requests[i];
      if (request.role != Role::kSummarize) continue;
      Decision& d = decisions[i];
      Rng rng(request.stream);
      if (codec_->view_name() == "symbolic") {
        std::vector<TokenId> kept;
        for (size_t k = 0; k < d.tokens.size(); ++k) {
          // The last symbol ends the summary (STOP): always kept.
          if (k + 1 == d.tokens.size() || rng.bernoulli(spec_.keep_rate)) kept.push_back(d.tokens[k]);
        }
        d.tokens = std::move(kept);
      } else {
        const std::string text = codec_->decode(codec_->summary_body(d.tokens));
        std::string out;
        size_t start = 0;
        bool first = true;
        while (start < text.size()) {
          size_t end = text.find('\n', start);
          if (end == std::string::npos) end = text.size();
          const std::string line = text.substr(start, end - start);
          // The first line is the summary's heading; every later line is one fact.
          if (first || rng.bernoulli(spec_.keep_rate)) out += line + "\n";
          first = false;
          start = end + 1;
        }
        d.tokens = codec_->encode_action(out);
      }
      if (static_cast<int64_t>(d.tokens.size()) > request.max_new_tokens) {
        d.tokens.resize(request.max_new_tokens);
        d.finish_reason = "length";
      }
      d.logprobs.clear();
      d.values.clear();
    }
  }

 private:
  const Policy& executor_;
  std::shared_ptr<const Codec> codec_;
  SummarizerSpec spec_;
};

int64_t common_prefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

sim::RolloutTrace record_episode(Episode& episode, const Policy& policy, int64_t env_ns) {
  sim::RolloutTrace trace;
  std::vector<TokenId> previous, prompt;
  bool after_summary = false;
  while (!episode.done()) {
    const Request& request = episode.request();
    Decision decision;
    const Request* one[] = {&request};
    policy.act(one, std::span<Decision>(&decision, 1));
    prompt.clear();
    request.prompt.copy_to(prompt);
    sim::SimCall call;
    call.kind = request.role == Role::kSummarize ? sim::CallKind::kSummarize : sim::CallKind::kExecute;
    call.prompt_tokens = static_cast<int64_t>(prompt.size());
    call.shared_prefix_tokens = common_prefix(prompt, previous);
    call.output_tokens = static_cast<int64_t>(decision.tokens.size());
    call.after_compaction = after_summary && call.kind == sim::CallKind::kExecute;
    call.env_ns = call.kind == sim::CallKind::kExecute ? env_ns : 0;
    after_summary = call.kind == sim::CallKind::kSummarize;
    previous.swap(prompt);
    previous.insert(previous.end(), decision.tokens.begin(), decision.tokens.end());
    trace.calls.push_back(call);
    episode.submit(decision);
  }
  trace.reward = episode.reward();
  trace.compactions = episode.context().compactions();
  trace.turns = episode.turn();
  return trace;
}

// The traces of one (summarizer, budget): rollout i plays task i mod tasks as sample i / tasks, generated on
// demand in chunks (in parallel; each trace depends only on its index) and kept for every strategy that
// shares them.
class TraceBook {
 public:
  TraceBook(const CostSpec& spec, const SummarizerSpec& summarizer, const Budget& budget,
            const Runner& runner)
      : spec_(spec), budget_(budget), runner_(runner) {
    probe_ = make_env(spec.env, spec.env_params);
    codec_ = make_codec(spec.view, probe_->spec());
    executor_ = make_policy(spec.executor, {}, PolicyTarget{&probe_->spec(), codec_});
    policy_ = std::make_unique<StubSummarizer>(*executor_, codec_, summarizer);
  }

  const sim::RolloutTrace& get(int64_t index) {
    requested_ = std::max(requested_, index + 1);
    if (index >= static_cast<int64_t>(traces_.size())) {
      // A few per thread at a time: the scheduler asks in launch order, one index after the other.
      const size_t begin = traces_.size();
      const size_t end = std::max<size_t>(static_cast<size_t>(index) + 1, begin + 4 * runner_.threads());
      std::vector<sim::RolloutTrace> fresh(end - begin);
      runner_.run(fresh.size(), [&](size_t k) { fresh[k] = make(static_cast<int64_t>(begin + k)); });
      for (auto& t : fresh) traces_.push_back(std::move(t));
    }
    return traces_[index];
  }
  // Episodes the simulation used (the book may have made a few more ahead; that number depends on the
  // thread count, this one does not).
  int64_t episodes() const { return requested_; }

 private:
  sim::RolloutTrace make(int64_t index) const {
    EpisodeConfig config;
    config.budget = budget_;
    config.seed = spec_.seed;
    config.sample_index = index / spec_.tasks;
    Episode episode(make_env(spec_.env, spec_.env_params), codec_, config);
    char id[32];
    std::snprintf(id, sizeof(id), "task-%04lld", static_cast<long long>(index % spec_.tasks));
    episode.start(Task{id, static_cast<uint64_t>(index % spec_.tasks), ""});
    return record_episode(episode, *policy_, spec_.env_step_ns);
  }

  const CostSpec& spec_;
  Budget budget_;
  const Runner& runner_;
  std::unique_ptr<Env> probe_;
  std::shared_ptr<const Codec> codec_;
  std::unique_ptr<Policy> executor_;
  std::unique_ptr<Policy> policy_;
  std::deque<sim::RolloutTrace> traces_;  // references stay valid as it grows
  int64_t requested_ = 0;
};

std::string budget_key(const std::string& summarizer, const Budget& b) {
  std::ostringstream out;
  out << summarizer << '|' << b.capacity << '|' << b.reserve << '|' << b.tail_k << '|' << b.per_turn_cap
      << '|' << b.summary_cap << '|' << b.max_compactions;
  return out.str();
}

Quantiles quantiles(std::vector<double> values) {
  Quantiles q;
  if (values.empty()) return q;
  std::sort(values.begin(), values.end());
  auto rank = [&](double p) {
    const size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(values.size())));
    return values[std::clamp<size_t>(k, 1, values.size()) - 1];
  };
  q.p50 = rank(0.5);
  q.p99 = rank(0.99);
  q.max = values.back();
  double sum = 0;
  for (double v : values) sum += v;
  q.mean = sum / static_cast<double>(values.size());
  return q;
}

StrategyResult measure(const sim::ScheduleResult& run, size_t stragglers) {
  StrategyResult r;
  r.launched_rollouts = static_cast<int64_t>(run.rollouts.size());
  r.discarded_rollouts = run.discarded;
  std::vector<double> walls, batches;
  double reward = 0, compactions = 0, turns = 0, gpu = 0, summary_ns = 0, queue_ns = 0, wall_ns = 0;
  double summary_tokens = 0, reprefill = 0, computed = 0, hits = 0, prompts = 0;
  for (const sim::RolloutRecord& x : run.rollouts) {
    if (x.consumed_by_step < 0) continue;
    ++r.trained_rollouts;
    reward += x.reward;
    compactions += x.compactions;
    turns += x.turns;
    gpu += x.gpu_seconds;
    summary_ns += static_cast<double>(x.summary_ns);
    queue_ns += static_cast<double>(x.queue_ns);
    wall_ns += static_cast<double>(x.wall_ns());
    walls.push_back(static_cast<double>(x.wall_ns()) * 1e-9);
    summary_tokens += static_cast<double>(x.summary_tokens);
    reprefill += static_cast<double>(x.reprefill_tokens);
    computed += static_cast<double>(x.prefill_tokens + x.output_tokens);
    hits += static_cast<double>(x.cache_hit_tokens);
    prompts += static_cast<double>(x.prompt_tokens);
    r.preemptions += x.preemptions;
  }
  double inference_ns = 0, trainer_ns = 0;
  for (const sim::BatchRecord& b : run.batches) {
    batches.push_back(static_cast<double>(b.wall_ns()) * 1e-9);
    inference_ns += static_cast<double>(b.rollouts_ready - b.started);
    trainer_ns += static_cast<double>(b.trained - b.rollouts_ready);
  }
  if (!run.batches.empty()) {
    r.batch_inference_seconds = inference_ns * 1e-9 / static_cast<double>(run.batches.size());
    r.batch_trainer_seconds = trainer_ns * 1e-9 / static_cast<double>(run.batches.size());
  }
  const double n = static_cast<double>(std::max<int64_t>(r.trained_rollouts, 1));
  r.success = reward / n;
  r.compactions = compactions / n;
  r.turns = turns / n;
  r.rollout_seconds = quantiles(walls);
  r.batch_seconds = quantiles(batches);
  r.gpu_seconds_per_trajectory = gpu / n;
  double batch_total = 0;
  for (double b : batches) batch_total += b;
  r.seconds_per_success = reward > 0 ? batch_total / reward : std::numeric_limits<double>::infinity();
  const double steps = static_cast<double>(std::max<size_t>(run.batches.size(), 1));
  r.train_gpu_seconds_per_step = run.train_seconds / steps;
  r.generation_gpu_seconds_per_step = run.server.busy_seconds / steps;
  r.summary_token_share = ratio_or_zero(summary_tokens, computed);
  r.reprefill_token_share = ratio_or_zero(reprefill, computed);
  r.cache_hit_rate = ratio_or_zero(hits, prompts);
  r.summary_seconds = summary_ns * 1e-9 / n;
  r.summary_time_share = ratio_or_zero(summary_ns, wall_ns);
  r.queue_time_share = ratio_or_zero(queue_ns, wall_ns);
  r.max_staleness = run.max_staleness_seen;
  r.simulated_seconds = static_cast<double>(run.end) * 1e-9;
  r.events = run.events;
  r.stragglers = sim::format_stragglers(run, stragglers);
  return r;
}

}  // namespace

CostResult run_compaction_cost(const CostSpec& spec, const CostRunOptions& options) {
  CostResult result;
  result.name = spec.name;
  result.summarizers = spec.summarizers;
  // Keep rates measured on trained policies' own summaries (compaction_cost_retention.h): from a results
  // folder, or from a scenario trained now (once per file).
  std::map<std::string, ScenarioResult> trained;
  auto describe = [](const Retention& r) {
    return std::to_string(static_cast<int64_t>(std::llround(r.summaries))) + " summaries, " +
           std::to_string(r.seeds) + " seeds";
  };
  for (SummarizerSpec& m : result.summarizers) {
    try {
      if (!m.retention_results.empty()) {
        const Retention r = read_retention(m.retention_results, m.trained_arm);
        m.keep_rate = r.keep_rate;
        m.keep_rate_source = "measured: mean recall of the needed facts per summary of arm `" +
                             m.trained_arm + "` in `" + m.retention_results + "/summary.json` (" +
                             describe(r) + ")";
      } else if (!m.trained_scenario.empty()) {
        if (!trained.count(m.trained_scenario)) {
          RunOptions run;
          run.threads = options.threads;
          trained[m.trained_scenario] = run_scenario(load_scenario(m.trained_scenario), run);
        }
        const Retention r = retention_of_arm(trained[m.trained_scenario], m.trained_arm, m.trained_scenario);
        m.keep_rate = r.keep_rate;
        m.keep_rate_source = "measured: mean recall of the needed facts per summary of arm `" +
                             m.trained_arm + "` after training `" + m.trained_scenario + "` now (" +
                             describe(r) + ")";
      }
    } catch (const Error& e) {
      // Name the study's field too: the file and the field that pointed at the source.
      throw Error(m.source_where, "summarizer " + quote(m.name),
                  std::string("cannot measure its keep rate: ") + e.what());
    }
  }

  const Runner runner(options.threads);
  std::map<std::string, std::unique_ptr<TraceBook>> books;
  for (const CostStrategy& st : spec.strategies) {
    if (options.progress) options.progress(st.name, false);
    const SummarizerSpec& m = *std::find_if(result.summarizers.begin(), result.summarizers.end(),
                                            [&](const SummarizerSpec& x) { return x.name == st.summarizer; });
    auto& book = books[budget_key(m.name, st.budget)];
    if (!book) book = std::make_unique<TraceBook>(spec, m, st.budget, runner);
    TraceBook* b = book.get();
    const sim::ScheduleResult run = sim::run_schedule(
        st.server, st.schedule, [b](int64_t i) -> const sim::RolloutTrace& { return b->get(i); });
    StrategyResult r = measure(run, static_cast<size_t>(spec.stragglers));
    r.strategy = &st;
    result.strategies.push_back(std::move(r));
    if (options.progress) options.progress(st.name, true);
  }
  for (const auto& [key, book] : books) result.episodes += book->episodes();
  return result;
}

void write_cost_results(const std::string& dir, const CostSpec& spec, const CostResult& result,
                        const std::string& command) {
  const std::filesystem::path base(dir);
  write_file_atomic((base / "summary.json").string(), format_cost_json(result));
  write_file_atomic((base / "strategies.csv").string(), format_cost_csv(result));
  write_file_atomic((base / "cost_vs_success.svg").string(), format_cost_svg(result));
  write_file_atomic((base / "report.md").string(), format_cost_report(spec, result, command));
}

}  // namespace crl::scenarios
