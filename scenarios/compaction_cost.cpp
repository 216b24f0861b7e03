#include "scenarios/compaction_cost.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/runner.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "policies/policy.h"
#include "proto/compaction_cost.pb.h"
#include "scenarios/report.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"
#include "scenarios/text_location.h"

namespace crl::scenarios {

namespace pb = google::protobuf;
namespace cc = proto::compaction_cost;

const char* summarizer_kind_name(SummarizerKind kind) {
  switch (kind) {
    case SummarizerKind::kOracle:
      return "oracle";
    case SummarizerKind::kFrozen:
      return "frozen";
    case SummarizerKind::kLearned:
      return "learned";
    case SummarizerKind::kNone:
      return "none";
  }
  return "?";
}

namespace {

// ---------------------------------------------------------------------------------------------------------
// Parsing and checking.

// "file:line:column" of a field of the study (scenarios/text_location.h).
class Locator final : public TextLocator {
 public:
  Locator(std::string path, const pb::TextFormat::ParseInfoTree& tree)
      : TextLocator(std::move(path), cc::CompactionCost::descriptor(), tree) {}
};

sim::SchedulerMode scheduler_mode(cc::SchedulerMode mode) {
  switch (mode) {
    case cc::ASYNC:
      return sim::SchedulerMode::kAsync;
    case cc::PARTIAL:
      return sim::SchedulerMode::kPartial;
    default:
      return sim::SchedulerMode::kSync;
  }
}

Budget budget_from(const cc::BudgetConfig& b) {
  Budget out;
  out.capacity = b.capacity();
  out.reserve = b.reserve();
  out.tail_k = b.tail_k();
  out.per_turn_cap = b.per_turn_cap();
  out.summary_cap = b.summary_cap();
  out.max_compactions = b.max_compactions();
  return out;
}

sim::ServerProfile profile_from(const cc::ServerConfig& s) {
  sim::ServerProfile p = sim::ServerProfile::h200_30b_a3b();
  if (s.has_name()) p.name = s.name();
  if (s.has_max_running()) p.max_running = s.max_running();
  if (s.has_kv_budget_tokens()) p.kv_budget_tokens = s.kv_budget_tokens();
  if (s.has_max_prefill_tokens_per_step()) p.max_prefill_tokens_per_step = s.max_prefill_tokens_per_step();
  if (s.has_prefill_tokens_per_s()) p.prefill_tokens_per_s = s.prefill_tokens_per_s();
  if (s.has_decode_base_ms()) p.decode_base_ms = s.decode_base_ms();
  if (s.has_decode_per_seq_ms()) p.decode_per_seq_ms = s.decode_per_seq_ms();
  if (s.has_decode_per_kv_token_ns()) p.decode_per_kv_token_ns = s.decode_per_kv_token_ns();
  if (s.has_prefix_cache()) p.prefix_cache = s.prefix_cache();
  return p;
}

template <typename Map>
std::map<std::string, std::string> sorted(const Map& map) {
  return std::map<std::string, std::string>(map.begin(), map.end());
}

// Checks a budget the way the episode will use it; errors point at `at` + the budget's field.
void check_budget(const Budget& budget, const Locator& at, FieldPath path, int64_t kv_budget) {
  try {
    budget.validate("budget");
  } catch (const Error& e) {
    path.push_back({e.field(), -1});
    at.fail(path, e.message());
  }
  if (budget.capacity > kv_budget) {
    path.push_back({"capacity", -1});
    at.fail(path, "context capacity " + std::to_string(budget.capacity) +
                      " is over the server's KV budget (" + std::to_string(kv_budget) +
                      " tokens): one sequence must fit the server");
  }
}

}  // namespace

bool is_compaction_cost(const std::string& text) {
  cc::CompactionCost file;
  FirstErrorCollector errors;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (parser.ParseFromString(text, &file)) return file.summarizer_size() > 0;
  // A compaction-cost file with a mistake in it is still one (so that its own parser reports the mistake):
  // a line that opens a top-level `summarizer` block, which no training scenario has.
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("summarizer {", 0) == 0 || line.rfind("summarizer{", 0) == 0) return true;
  }
  return false;
}

CostSpec parse_compaction_cost(const std::string& text, const std::string& path) {
  cc::CompactionCost file;
  pb::TextFormat::ParseInfoTree tree;
  parse_text_file(text, path, "compaction-cost file", file, tree);
  const Locator at(path, tree);

  CostSpec spec;
  spec.path = path;
  spec.name = file.name();
  spec.description = file.description();
  spec.seed = file.seed();
  spec.env = file.env();
  spec.env_params = sorted(file.env_params());
  spec.executor = file.executor();
  spec.view = file.view();
  spec.tasks = file.tasks();
  spec.stragglers = file.stragglers();
  if (spec.name.empty()) at.fail({{"name", -1}}, "a compaction-cost file needs a name");
  if (spec.tasks < 1) at.fail({{"tasks", -1}}, "value " + std::to_string(spec.tasks) + " must be >= 1");
  if (spec.stragglers < 0) at.fail({{"stragglers", -1}}, "must be >= 0");

  // Environment, view, executor: built once here so that a bad name fails before anything runs.
  std::unique_ptr<Env> env;
  try {
    env = make_env(spec.env, spec.env_params, "environment " + quote(spec.env));
  } catch (const Error& e) {
    if (!env_registry().contains(spec.env)) at.fail({{"env", -1}}, e.message());
    at.fail({{"env_params", -1}},
            "environment " + quote(spec.env) + ": parameter " + quote(e.field()) + ": " + e.message());
  }
  // Rollout i plays task i mod tasks: tasks past the end of the environment's list would alias others.
  if (const auto list = env->task_list(); list && static_cast<uint64_t>(spec.tasks) > list->size) {
    at.fail({{"tasks", -1}}, "value " + std::to_string(spec.tasks) + " is more than " + list->name +
                                 " holds (" + std::to_string(list->size) + " tasks)");
  }
  std::shared_ptr<const Codec> codec;
  try {
    codec = make_codec(spec.view, env->spec());
  } catch (const Error& e) {
    at.fail({{"view", -1}}, e.message());
  }
  try {
    make_policy(spec.executor, {}, PolicyTarget{&env->spec(), codec}, "executor " + quote(spec.executor));
  } catch (const Error& e) {
    at.fail({{"executor", -1}}, e.message());
  }

  // Server profile.
  spec.server = profile_from(file.server());
  try {
    spec.server.validate("server");
  } catch (const Error& e) {
    at.fail({{"server", -1}, {e.field(), -1}}, e.message());
  }

  // Base schedule.
  const cc::ScheduleConfig& s = file.schedule();
  sim::ScheduleOptions schedule;
  schedule.mode = scheduler_mode(s.mode());
  schedule.batch_size = s.batch_size();
  schedule.train_steps = s.train_steps();
  schedule.concurrency = s.concurrency();
  schedule.max_staleness = s.max_staleness();
  if (s.updates_per_step() < 1) at.fail({{"schedule", -1}, {"updates_per_step", -1}}, "must be >= 1");
  schedule.train_seconds_per_token = s.has_train_seconds_per_token()
                                         ? s.train_seconds_per_token()
                                         : s.updates_per_step() * 3.0 / spec.server.prefill_tokens_per_s;
  schedule.train_overhead_seconds = s.train_overhead_s();
  try {
    schedule.validate("schedule");
  } catch (const Error& e) {
    const std::string field = e.field() == "train_overhead_seconds" ? "train_overhead_s" : e.field();
    at.fail({{"schedule", -1}, {field, -1}}, e.message());
  }
  if (!(std::isfinite(s.env_step_s()) && s.env_step_s() >= 0.0)) {
    at.fail({{"schedule", -1}, {"env_step_s", -1}}, "must be >= 0");
  }
  spec.env_step_ns = static_cast<int64_t>(std::llround(s.env_step_s() * 1e9));

  const Budget base_budget = budget_from(file.budget());
  check_budget(base_budget, at, {{"budget", -1}}, spec.server.kv_budget_tokens);

  // Summarizers.
  if (file.summarizer_size() == 0) at.fail({{"summarizer", -1}}, "the file needs at least one summarizer");
  std::set<std::string> names;
  for (int i = 0; i < file.summarizer_size(); ++i) {
    const cc::Summarizer& m = file.summarizer(i);
    SummarizerSpec out;
    out.name = m.name();
    out.kind = static_cast<SummarizerKind>(m.kind());
    if (out.name.empty()) at.fail({{"summarizer", i}}, "a summarizer needs a name");
    if (!names.insert(out.name).second) {
      at.fail({{"summarizer", i}, {"name", -1}}, "summarizer name " + quote(out.name) + " appears twice");
    }
    const FieldPath here = {{"summarizer", i}};
    auto sub = [&](const char* field) {
      FieldPath p = here;
      p.push_back({field, -1});
      return p;
    };
    if (out.kind == SummarizerKind::kFrozen || out.kind == SummarizerKind::kLearned) {
      if (m.has_keep_rate() == !m.trained_scenario().empty()) {
        at.fail(here, std::string(summarizer_kind_name(out.kind)) +
                          " summarizer needs exactly one of keep_rate or trained_scenario (+ trained_arm)");
      }
      if (m.has_keep_rate()) {
        if (!(m.keep_rate() >= 0.0 && m.keep_rate() <= 1.0)) {
          at.fail(sub("keep_rate"), "value " + quote(m.keep_rate()) + " is outside [0, 1]");
        }
        out.keep_rate = m.keep_rate();
        out.keep_rate_source = "given in the file";
      } else {
        out.trained_scenario = m.trained_scenario();
        out.trained_arm = m.trained_arm();
        if (out.trained_arm.empty()) at.fail(sub("trained_arm"), "name the arm of the trained scenario");
        ScenarioSpec trained;
        try {
          trained = load_scenario(out.trained_scenario);
        } catch (const Error& e) {
          at.fail(sub("trained_scenario"), std::string("cannot use it: ") + e.what());
        }
        const bool has_arm = std::any_of(trained.arms.begin(), trained.arms.end(),
                                         [&](const ArmSpec& a) { return a.name == out.trained_arm; });
        if (!has_arm) {
          at.fail(sub("trained_arm"),
                  "arm " + quote(out.trained_arm) + " is not in " + quote(out.trained_scenario));
        }
      }
    } else if (m.has_keep_rate() || !m.trained_scenario().empty()) {
      at.fail(sub(m.has_keep_rate() ? "keep_rate" : "trained_scenario"),
              std::string("a ") + summarizer_kind_name(out.kind) + " summarizer takes no keep rate");
    }
    if (out.kind == SummarizerKind::kNone) {
      out.capacity = m.capacity();
      Budget b = base_budget;
      b.capacity = out.capacity;
      check_budget(b, at, sub("capacity"), spec.server.kv_budget_tokens);
      if (out.capacity <= base_budget.capacity) {
        at.fail(sub("capacity"), "the no-compaction context (" + std::to_string(out.capacity) +
                                     ") must be larger than budget.capacity (" +
                                     std::to_string(base_budget.capacity) + ")");
      }
    } else if (out.kind == SummarizerKind::kOracle) {
      out.keep_rate = 1.0;
      out.keep_rate_source = "keeps every fact (the executor's own summary)";
    }
    spec.summarizers.push_back(out);
  }

  auto base_of = [&](const SummarizerSpec& m) {
    CostStrategy st;
    st.name = m.name;
    st.summarizer = m.name;
    st.variant = "base";
    st.budget = base_budget;
    if (m.kind == SummarizerKind::kNone) {
      st.budget.capacity = m.capacity;
      st.budget.max_compactions = 0;  // the trigger would end the episode: it must not fire at all
    }
    st.schedule = schedule;
    st.server = spec.server;
    return st;
  };
  for (const SummarizerSpec& m : spec.summarizers) spec.strategies.push_back(base_of(m));

  // Sweeps: one field at a time over the base.
  for (int i = 0; i < file.sweep_size(); ++i) {
    const cc::Sweep& w = file.sweep(i);
    const FieldPath here = {{"sweep", i}};
    if (!w.has_field()) at.fail(here, "a sweep needs a field");
    const bool is_mode = w.field() == cc::Sweep::SCHEDULER;
    const bool is_budget = w.field() == cc::Sweep::RESERVE || w.field() == cc::Sweep::TAIL_K ||
                           w.field() == cc::Sweep::SUMMARY_CAP;
    if (is_mode ? w.modes_size() == 0 : w.values_size() == 0) {
      at.fail({{"sweep", i}, {is_mode ? "modes" : "values", -1}}, "a sweep needs at least one value");
    }
    std::vector<const SummarizerSpec*> swept;
    for (int j = 0; j < w.summarizers_size(); ++j) {
      const auto it = std::find_if(spec.summarizers.begin(), spec.summarizers.end(),
                                   [&](const SummarizerSpec& m) { return m.name == w.summarizers(j); });
      if (it == spec.summarizers.end()) {
        at.fail({{"sweep", i}, {"summarizers", j}}, "no summarizer named " + quote(w.summarizers(j)));
      }
      if (is_budget && it->kind == SummarizerKind::kNone) {
        at.fail({{"sweep", i}, {"summarizers", j}},
                "summarizer " + quote(it->name) + " does not compact: a budget sweep does not apply");
      }
      swept.push_back(&*it);
    }
    if (swept.empty()) {
      for (const SummarizerSpec& m : spec.summarizers) {
        if (!(is_budget && m.kind == SummarizerKind::kNone)) swept.push_back(&m);
      }
    }
    const std::string field_name = cc::Sweep::Field_Name(w.field());
    std::string field_lower = field_name;
    std::transform(field_lower.begin(), field_lower.end(), field_lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const int count = is_mode ? w.modes_size() : w.values_size();
    for (int j = 0; j < count; ++j) {
      for (const SummarizerSpec* m : swept) {
        CostStrategy st = base_of(*m);
        st.sweep_field = field_lower;
        std::string value;
        const FieldPath at_value = {{"sweep", i}, {is_mode ? "modes" : "values", j}};
        if (is_mode) {
          st.schedule.mode = scheduler_mode(w.modes(j));
          value = sim::scheduler_name(st.schedule.mode);
        } else {
          const int64_t v = w.values(j);
          value = std::to_string(v);
          switch (w.field()) {
            case cc::Sweep::RESERVE:
              st.budget.reserve = v;
              break;
            case cc::Sweep::TAIL_K:
              if (v < 0 || v > 1000) at.fail(at_value, "tail_k " + value + " must be in [0, 1000]");
              st.budget.tail_k = static_cast<int>(v);
              break;
            case cc::Sweep::SUMMARY_CAP:
              st.budget.summary_cap = v;
              break;
            case cc::Sweep::CONCURRENCY:
              st.schedule.concurrency = v;
              break;
            case cc::Sweep::KV_BUDGET:
              st.server.kv_budget_tokens = v;
              break;
            default:
              break;
          }
          try {
            st.budget.validate("budget");
            st.schedule.validate("schedule");
            st.server.validate("server");
          } catch (const Error& e) {
            at.fail(at_value, field_lower + "=" + value + ": " + e.field() + ": " + e.message());
          }
          if (st.budget.capacity > st.server.kv_budget_tokens) {
            at.fail(at_value, field_lower + "=" + value +
                                  ": the server's KV budget is below the context capacity (" +
                                  std::to_string(st.budget.capacity) + " tokens of " + m->name +
                                  "): one sequence must fit");
          }
        }
        st.variant = field_lower + "=" + value;
        st.name = m->name + " " + st.variant;
        spec.strategies.push_back(st);
      }
    }
  }
  return spec;
}

CostSpec load_compaction_cost(const std::string& path) {
  return parse_compaction_cost(read_file(path), path);
}

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

double ratio(double a, double b) {
  return b > 0 ? a / b : 0.0;
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
  for (const sim::BatchRecord& b : run.batches) batches.push_back(static_cast<double>(b.wall_ns()) * 1e-9);
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
  r.summary_token_share = ratio(summary_tokens, computed);
  r.reprefill_token_share = ratio(reprefill, computed);
  r.cache_hit_rate = ratio(hits, prompts);
  r.summary_seconds = summary_ns * 1e-9 / n;
  r.summary_time_share = ratio(summary_ns, wall_ns);
  r.queue_time_share = ratio(queue_ns, wall_ns);
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
  // Keep rates of summarizers read from a trained scenario: train it once per file, take the arm's
  // held-out accuracy.
  std::map<std::string, ScenarioResult> trained;
  for (SummarizerSpec& m : result.summarizers) {
    if (m.trained_scenario.empty()) continue;
    if (!trained.count(m.trained_scenario)) {
      RunOptions run;
      run.threads = options.threads;
      trained[m.trained_scenario] = run_scenario(load_scenario(m.trained_scenario), run);
    }
    for (const ArmResult& arm : trained[m.trained_scenario].arms) {
      if (arm.name != m.trained_arm) continue;
      m.keep_rate = arm.mean_accuracy;
      m.keep_rate_source = "held-out accuracy of arm `" + m.trained_arm + "` after training `" +
                           m.trained_scenario + "` (" + std::to_string(arm.seeds.size()) + " seeds)";
    }
  }

  const Runner runner(options.threads);
  std::map<std::string, std::unique_ptr<TraceBook>> books;
  for (const CostStrategy& st : spec.strategies) {
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
  }
  for (const auto& [key, book] : books) result.episodes += book->episodes();
  return result;
}

// -------------------------------------------------------------------------------------------------------------
// Outputs.

namespace {

std::string pct(double v) {
  return format_fixed(100.0 * v, 1) + "%";
}
std::string sec(double v) {
  if (v >= 100) return format_fixed(v, 0) + " s";
  if (v >= 1) return format_fixed(v, 2) + " s";
  return format_fixed(v * 1000.0, 1) + " ms";
}

std::string per_success(const StrategyResult& r) {
  return std::isfinite(r.seconds_per_success) ? sec(r.seconds_per_success) : std::string("no task solved");
}

const StrategyResult* base_of_kind(const CostSpec& spec, const CostResult& result, SummarizerKind kind) {
  for (const StrategyResult& r : result.strategies) {
    if (r.strategy->variant != "base") continue;
    for (const SummarizerSpec& m : result.summarizers) {
      if (m.name == r.strategy->summarizer && m.kind == kind) return &r;
    }
  }
  (void)spec;
  return nullptr;
}

void strategy_table(std::ostringstream& out, const std::vector<const StrategyResult*>& rows) {
  out << "| strategy | success | rollout p50 / p99 | batch p50 / p99 | GPU-s / trajectory | trainer s / step "
         "| summary tokens | re-prefill tokens | prefix-cache hits | summary time | queueing | compactions | "
         "turns | preemptions |\n";
  out << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const StrategyResult* r : rows) {
    out << "| " << r->strategy->name << " | " << pct(r->success) << " | " << sec(r->rollout_seconds.p50)
        << " / " << sec(r->rollout_seconds.p99) << " | " << sec(r->batch_seconds.p50) << " / "
        << sec(r->batch_seconds.p99) << " | " << format_fixed(r->gpu_seconds_per_trajectory, 3) << " | "
        << format_fixed(r->train_gpu_seconds_per_step, 2) << " | " << pct(r->summary_token_share) << " | "
        << pct(r->reprefill_token_share) << " | " << pct(r->cache_hit_rate) << " | "
        << pct(r->summary_time_share) << " | " << pct(r->queue_time_share) << " | "
        << format_fixed(r->compactions, 2) << " | " << format_fixed(r->turns, 1) << " | " << r->preemptions
        << " |\n";
  }
}

}  // namespace

std::string format_cost_report(const CostSpec& spec, const CostResult& result, const std::string& command) {
  std::ostringstream out;
  out << "# Compaction cost: `" << result.name << "`\n\n";
  if (!spec.description.empty()) out << spec.description << "\n\n";
  out << "Produced by `" << command << "` (file `" << spec.path << "`, seed " << spec.seed << "). "
      << result.episodes << " real episodes (`" << spec.env << "`, " << spec.view << " view, executor `"
      << spec.executor << "`, " << spec.tasks << " tasks) gave the token counts of every call; "
      << result.strategies.size() << " strategies were simulated. Every number below is simulated time on "
      << "the server profile, not a measurement of this machine; the same file and seed give this file byte "
      << "for byte.\n";

  // The answers first.
  const StrategyResult* learned = base_of_kind(spec, result, SummarizerKind::kLearned);
  const StrategyResult* frozen = base_of_kind(spec, result, SummarizerKind::kFrozen);
  const StrategyResult* oracle = base_of_kind(spec, result, SummarizerKind::kOracle);
  const StrategyResult* none = base_of_kind(spec, result, SummarizerKind::kNone);
  const StrategyResult* main = learned ? learned : (oracle ? oracle : (frozen ? frozen : nullptr));
  out << "\n## Answers\n\n";
  if (main != nullptr) {
    out << "- **How long do summary calls block an agent?** With the `" << main->strategy->summarizer
        << "` summarizer a rollout spends " << sec(main->summary_seconds) << " on average waiting for its "
        << format_fixed(main->compactions, 2) << " summary calls, " << pct(main->summary_time_share)
        << " of its wall-clock time (p50 rollout " << sec(main->rollout_seconds.p50) << ").\n";
    out << "- **GPU time per training step:** " << format_fixed(main->generation_gpu_seconds_per_step, 1)
        << " GPU-seconds of inference-server time (" << format_fixed(main->gpu_seconds_per_trajectory, 3)
        << " per trained trajectory) plus " << format_fixed(main->train_gpu_seconds_per_step, 1)
        << " trainer GPU-seconds per step of " << main->strategy->schedule.batch_size << " rollouts";
    if (none != nullptr) {
      out << "; without compaction (one " << none->strategy->budget.capacity << "-token context) it is "
          << format_fixed(none->generation_gpu_seconds_per_step, 1) << " + "
          << format_fixed(none->train_gpu_seconds_per_step, 1);
    }
    out << ".\n";
    out << "- **Token overhead of summaries:** summary calls take " << pct(main->summary_token_share)
        << " of the tokens the server computes or generates, and re-prefilling the rebuilt context after "
           "each compaction another "
        << pct(main->reprefill_token_share) << "; the prefix cache serves " << pct(main->cache_hit_rate)
        << " of all prompt tokens";
    if (none != nullptr) out << " (" << pct(none->cache_hit_rate) << " without compaction)";
    out << ".\n";
  }
  if (learned != nullptr && frozen != nullptr) {
    const double saved = frozen->batch_seconds.p50 - learned->batch_seconds.p50;
    out << "- **Does a learned summarizer save wall-clock time over a frozen one?** "
        << (saved > 0 ? "Yes" : "No") << ": the learned summarizer's median training batch takes "
        << sec(learned->batch_seconds.p50) << " against " << sec(frozen->batch_seconds.p50)
        << " for the frozen "
        << "one (" << (saved >= 0 ? "" : "+")
        << format_fixed(std::fabs(100.0 * ratio(saved, frozen->batch_seconds.p50)), 1) << "% "
        << (saved >= 0 ? "less" : "more") << "; p99 rollout " << sec(learned->rollout_seconds.p99) << " vs "
        << sec(frozen->rollout_seconds.p99) << "), with " << format_fixed(learned->turns, 1) << " vs "
        << format_fixed(frozen->turns, 1) << " turns and " << format_fixed(learned->compactions, 2) << " vs "
        << format_fixed(frozen->compactions, 2) << " compactions per rollout, and it succeeds on "
        << pct(learned->success) << " of rollouts against " << pct(frozen->success)
        << ". Per solved task (training wall-clock / successful rollouts): " << per_success(*learned)
        << " vs " << per_success(*frozen) << ".\n";
  } else {
    out << "- **Learned vs frozen:** not measured (the file does not have both a learned and a frozen "
           "summarizer).\n";
  }

  out << "\n## Summarizers\n\n| summarizer | kind | keep rate per fact line | where the rate comes from |\n"
         "|---|---|---|---|\n";
  for (const SummarizerSpec& m : result.summarizers) {
    out << "| " << m.name << " | " << summarizer_kind_name(m.kind) << " | "
        << (m.kind == SummarizerKind::kNone ? "-" : format_fixed(m.keep_rate, 4)) << " | "
        << (m.kind == SummarizerKind::kNone
                ? "no compaction: one context of " + std::to_string(m.capacity) + " tokens"
                : m.keep_rate_source)
        << " |\n";
  }

  out << "\n## Strategies\n\nBase setup: budget C " << result.strategies.front().strategy->budget.capacity
      << ", T_comp " << spec.strategies.front().budget.reserve << ", tail k "
      << spec.strategies.front().budget.tail_k << ", summary cap "
      << spec.strategies.front().budget.summary_cap << ", per-turn cap "
      << spec.strategies.front().budget.per_turn_cap << ", at most "
      << spec.strategies.front().budget.max_compactions << " compactions; scheduler "
      << sim::scheduler_name(spec.strategies.front().schedule.mode) << ", "
      << spec.strategies.front().schedule.concurrency << " rollouts in flight, batch "
      << spec.strategies.front().schedule.batch_size << ", " << spec.strategies.front().schedule.train_steps
      << " training steps, environment time " << sec(static_cast<double>(spec.env_step_ns) * 1e-9)
      << " per execution call.\n\n";
  std::vector<const StrategyResult*> rows;
  for (const StrategyResult& r : result.strategies) {
    if (r.strategy->variant == "base") rows.push_back(&r);
  }
  strategy_table(out, rows);
  out << "\nColumns: success = mean reward of the trained rollouts; rollout = launch to last answer; batch = "
         "one training step's generation + training (p50/p99 over steps); GPU-s / trajectory = "
         "inference-server "
         "GPU time attributed to a trained rollout's calls; summary / re-prefill tokens = share of the "
         "tokens "
         "the server computed (prompt tokens not served by the cache) or generated; summary time and "
         "queueing "
         "= share of the rollouts' wall-clock time.\n";

  std::vector<std::string> fields;
  for (const CostStrategy& st : spec.strategies) {
    if (!st.sweep_field.empty() && std::find(fields.begin(), fields.end(), st.sweep_field) == fields.end()) {
      fields.push_back(st.sweep_field);
    }
  }
  for (const std::string& field : fields) {
    out << "\n### Sweep: " << field << "\n\n";
    rows.clear();
    for (const StrategyResult& r : result.strategies) {
      if (r.strategy->sweep_field == field) rows.push_back(&r);
    }
    strategy_table(out, rows);
    for (const StrategyResult* r : rows) {
      if (r->discarded_rollouts > 0 || r->max_staleness > 0) {
        out << "\n"
            << r->strategy->name << ": " << r->discarded_rollouts << " finished rollouts discarded as "
            << "too stale, largest staleness trained " << r->max_staleness << ".";
      }
    }
    out << "\n";
  }

  out << "\n## Stragglers\n\nThe longest trained rollouts of each base strategy, and where their time "
         "went.\n";
  for (const StrategyResult& r : result.strategies) {
    if (r.strategy->variant != "base" || r.stragglers.empty()) continue;
    out << "\n**" << r.strategy->name << "**\n\n```\n" << r.stragglers << "```\n";
  }

  const sim::ServerProfile& p = spec.server;
  out << "\n## Server profile `" << p.name << "`\n\n| parameter | value |\n|---|---|\n"
      << "| concurrent sequences | " << p.max_running << " |\n"
      << "| KV-cache budget | " << p.kv_budget_tokens << " tokens |\n"
      << "| prefill | " << format_fixed(p.prefill_tokens_per_s, 0) << " tokens/s, at most "
      << p.max_prefill_tokens_per_step << " per step (chunked) |\n"
      << "| decode step | " << format_fixed(p.decode_base_ms, 3) << " ms + "
      << format_fixed(p.decode_per_seq_ms, 3) << " ms per sequence + "
      << format_fixed(p.decode_per_kv_token_ns, 1) << " ns per KV token read |\n"
      << "| prefix cache | " << (p.prefix_cache ? "on" : "off") << " |\n";
  out << "\nThe default values (engine/sim/README.md derives them, with sources) model a 30B-A3B MoE model "
         "(Qwen3-30B-A3B / GLM-4.7-Flash class) in BF16 on one H200: decode is bound by reading the weights "
         "and the KV cache, prefill by compute.\n";

  out << "\n## What is modeled and what is assumed\n\n"
         "- Modeled: every call of every rollout, with the exact prompt, shared-prefix and output token "
         "counts "
         "of a real episode under the strategy's budget; continuous batching with chunked prefill; FIFO "
         "admission bounded by concurrent sequences and KV memory; a per-rollout prefix cache (LRU eviction "
         "of "
         "idle entries) that misses a rebuilt context after its system prompt; preemption by recomputation "
         "when "
         "decoding outgrows the KV budget; summary calls blocking their rollout; environment time; training "
         "steps on a separate trainer; synchronous, bounded-staleness asynchronous and partial-rollout "
         "scheduling.\n"
         "- Assumed: the server profile (derived from hardware figures and published measurements, not "
         "measured "
         "here); one engine token is one model token (the built-in byte tokenizer makes contexts about 4x "
         "longer "
         "than a BPE tokenizer would); the executor and summarizers are scripted stubs, so the learned and "
         "frozen "
         "summarizers differ only by how many fact lines they keep (the rate comes from the trained scenario "
         "or "
         "the file), not by what a neural model would write; the scripted executor's turns are short "
         "commands "
         "(tens of tokens) while its summaries run to hundreds, so summary decoding weighs more here than "
         "with an "
         "LLM agent whose turns carry reasoning; trainer time is tokens x "
         "train_seconds_per_token; "
         "no prefix sharing across rollouts (a shared system prompt would raise every hit rate a little); "
         "no speculative decoding, no tensor or expert parallelism, one server.\n";
  out << "\nFiles: `summary.json` (every metric of every strategy), `strategies.csv`, "
         "`cost_vs_success.svg`.\n";
  return out.str();
}

std::string format_cost_json(const CostResult& result) {
  nlohmann::ordered_json doc;
  doc["name"] = result.name;
  doc["episodes"] = result.episodes;
  doc["summarizers"] = nlohmann::ordered_json::array();
  for (const SummarizerSpec& m : result.summarizers) {
    doc["summarizers"].push_back({{"name", m.name},
                                  {"kind", summarizer_kind_name(m.kind)},
                                  {"keep_rate", m.keep_rate},
                                  {"source", m.keep_rate_source}});
  }
  doc["strategies"] = nlohmann::ordered_json::array();
  for (const StrategyResult& r : result.strategies) {
    nlohmann::ordered_json s;
    s["name"] = r.strategy->name;
    s["summarizer"] = r.strategy->summarizer;
    s["variant"] = r.strategy->variant;
    s["success"] = r.success;
    s["trained_rollouts"] = r.trained_rollouts;
    s["launched_rollouts"] = r.launched_rollouts;
    s["discarded_rollouts"] = r.discarded_rollouts;
    s["rollout_seconds"] = {{"p50", r.rollout_seconds.p50},
                            {"p99", r.rollout_seconds.p99},
                            {"mean", r.rollout_seconds.mean},
                            {"max", r.rollout_seconds.max}};
    s["batch_seconds"] = {{"p50", r.batch_seconds.p50},
                          {"p99", r.batch_seconds.p99},
                          {"mean", r.batch_seconds.mean},
                          {"max", r.batch_seconds.max}};
    s["gpu_seconds_per_trajectory"] = r.gpu_seconds_per_trajectory;
    s["seconds_per_success"] = std::isfinite(r.seconds_per_success)
                                   ? nlohmann::ordered_json(r.seconds_per_success)
                                   : nlohmann::ordered_json(nullptr);
    s["generation_gpu_seconds_per_step"] = r.generation_gpu_seconds_per_step;
    s["train_gpu_seconds_per_step"] = r.train_gpu_seconds_per_step;
    s["summary_token_share"] = r.summary_token_share;
    s["reprefill_token_share"] = r.reprefill_token_share;
    s["cache_hit_rate"] = r.cache_hit_rate;
    s["summary_seconds"] = r.summary_seconds;
    s["summary_time_share"] = r.summary_time_share;
    s["queue_time_share"] = r.queue_time_share;
    s["compactions"] = r.compactions;
    s["turns"] = r.turns;
    s["preemptions"] = r.preemptions;
    s["max_staleness"] = r.max_staleness;
    s["simulated_seconds"] = r.simulated_seconds;
    s["events"] = r.events;
    doc["strategies"].push_back(s);
  }
  return doc.dump(2) + "\n";
}

std::string format_cost_csv(const CostResult& result) {
  std::ostringstream out;
  out << "strategy,summarizer,variant,success,rollout_p50_s,rollout_p99_s,batch_p50_s,batch_p99_s,"
         "gpu_s_per_trajectory,train_s_per_step,summary_token_share,reprefill_token_share,cache_hit_rate,"
         "summary_time_share,queue_time_share,compactions,turns,preemptions\n";
  for (const StrategyResult& r : result.strategies) {
    out << '"' << r.strategy->name << "\"," << r.strategy->summarizer << ',' << r.strategy->variant << ','
        << format_fixed(r.success, 6) << ',' << format_fixed(r.rollout_seconds.p50, 6) << ','
        << format_fixed(r.rollout_seconds.p99, 6) << ',' << format_fixed(r.batch_seconds.p50, 6) << ','
        << format_fixed(r.batch_seconds.p99, 6) << ',' << format_fixed(r.gpu_seconds_per_trajectory, 6) << ','
        << format_fixed(r.train_gpu_seconds_per_step, 6) << ',' << format_fixed(r.summary_token_share, 6)
        << ',' << format_fixed(r.reprefill_token_share, 6) << ',' << format_fixed(r.cache_hit_rate, 6) << ','
        << format_fixed(r.summary_time_share, 6) << ',' << format_fixed(r.queue_time_share, 6) << ','
        << format_fixed(r.compactions, 4) << ',' << format_fixed(r.turns, 4) << ',' << r.preemptions << '\n';
  }
  return out.str();
}

std::string format_cost_svg(const CostResult& result) {
  // x = GPU-seconds per trajectory, y = success; one colour per summarizer; base strategies are larger and
  // labelled.
  using P = PercentPlot;
  double max_cost = 0;
  for (const StrategyResult& r : result.strategies)
    max_cost = std::max(max_cost, r.gpu_seconds_per_trajectory);
  max_cost = max_cost > 0 ? max_cost * 1.1 : 1.0;
  auto x = [&](double c) { return P::kLeft + P::kPlotWidth * c / max_cost; };
  auto y = [&](double s) { return P::y(s); };
  std::ostringstream out;
  P::open(out, result.name + ": success vs GPU-seconds per trajectory");
  for (int i = 0; i <= 4; ++i) {
    const double c = max_cost * i / 4.0;
    out << "<text x=\"" << format_fixed(x(c), 2) << "\" y=\"" << P::kTop + P::kPlotHeight + 20
        << "\" text-anchor=\"middle\">" << format_fixed(c, 3) << "</text>\n";
  }
  P::frame(out, "inference GPU-seconds per trained trajectory", "task success");
  out << "<g id=\"points\">\n";
  for (const StrategyResult& r : result.strategies) {
    size_t series = 0;
    for (size_t k = 0; k < result.summarizers.size(); ++k) {
      if (result.summarizers[k].name == r.strategy->summarizer) series = k;
    }
    const bool base = r.strategy->variant == "base";
    out << "<circle cx=\"" << format_fixed(x(r.gpu_seconds_per_trajectory), 2) << "\" cy=\""
        << format_fixed(y(r.success), 2) << "\" r=\"" << (base ? 6 : 3.5) << "\" fill=\""
        << plot_color(series) << "\" fill-opacity=\"" << (base ? "0.9" : "0.5") << "\"><title>"
        << xml_escape(r.strategy->name) << ": " << pct(r.success) << ", "
        << format_fixed(r.gpu_seconds_per_trajectory, 3) << " GPU-s</title></circle>\n";
    if (base) {
      out << "<text x=\"" << format_fixed(x(r.gpu_seconds_per_trajectory) + 8, 2) << "\" y=\""
          << format_fixed(y(r.success) - 6, 2) << "\">" << xml_escape(r.strategy->name) << "</text>\n";
    }
  }
  out << "</g>\n<g id=\"legend\">\n";
  const double lx = P::kLeft + P::kPlotWidth + 16;
  double ly = P::kTop + 4;
  out << "<text x=\"" << lx << "\" y=\"" << ly << "\" font-weight=\"bold\">summarizers</text>\n";
  for (size_t k = 0; k < result.summarizers.size(); ++k) {
    ly += 20;
    out << "<circle cx=\"" << lx + 6 << "\" cy=\"" << ly - 4 << "\" r=\"5\" fill=\"" << plot_color(k)
        << "\"/>\n<text x=\"" << lx + 18 << "\" y=\"" << ly << "\">" << xml_escape(result.summarizers[k].name)
        << "</text>\n";
  }
  out << "<text x=\"" << lx << "\" y=\"" << ly + 26 << "\" fill=\"#555555\">large: base setup</text>\n";
  out << "<text x=\"" << lx << "\" y=\"" << ly + 42 << "\" fill=\"#555555\">small: sweep points</text>\n";
  out << "</g>\n</svg>\n";
  return out.str();
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
