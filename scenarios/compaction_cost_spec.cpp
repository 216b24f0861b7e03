// Parsing and checking of a compaction-cost study file (scenarios/compaction_cost.h): the protobuf text
// format, every field checked with its file:line:column, the sweeps expanded into strategies.
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "engine/file_io.h"
#include "envs/registry.h"
#include "policies/policy.h"
#include "proto/compaction_cost.pb.h"
#include "scenarios/compaction_cost.h"
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
class CostFileLocator final : public TextLocator {
 public:
  CostFileLocator(std::string path, const pb::TextFormat::ParseInfoTree& tree)
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

// Checks a budget the way the episode will use it; errors point at `at` + the budget's field.
void check_budget(const Budget& budget, const CostFileLocator& at, FieldPath path, int64_t kv_budget) {
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
  const CostFileLocator at(path, tree);

  CostSpec spec;
  spec.path = path;
  spec.name = file.name();
  spec.description = file.description();
  spec.seed = file.seed();
  spec.env = file.env();
  spec.env_params = std::map<std::string, std::string>(file.env_params().begin(), file.env_params().end());
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
      const int sources = (m.has_keep_rate() ? 1 : 0) + (m.trained_scenario().empty() ? 0 : 1) +
                          (m.retention_results().empty() ? 0 : 1);
      if (sources != 1) {
        at.fail(here, std::string(summarizer_kind_name(out.kind)) +
                          " summarizer needs exactly one of keep_rate, retention_results (+ trained_arm) or "
                          "trained_scenario (+ trained_arm)");
      }
      if (m.has_keep_rate()) {
        if (!(m.keep_rate() >= 0.0 && m.keep_rate() <= 1.0)) {
          at.fail(sub("keep_rate"), "value " + quote(m.keep_rate()) + " is outside [0, 1]");
        }
        out.keep_rate = m.keep_rate();
        out.keep_rate_source = "given in the file";
      } else {
        out.trained_arm = m.trained_arm();
        if (out.trained_arm.empty()) at.fail(sub("trained_arm"), "name the arm whose summaries are measured");
      }
      if (!m.retention_results().empty()) {
        // Read at run time (the folder may be written after this file): errors then name this field.
        out.retention_results = m.retention_results();
        out.source_where = at.where(sub("retention_results"));
      } else if (!m.trained_scenario().empty()) {
        out.trained_scenario = m.trained_scenario();
        out.source_where = at.where(sub("trained_scenario"));
        ScenarioSpec trained;
        try {
          trained = load_scenario(out.trained_scenario);
        } catch (const Error& e) {
          at.fail(sub("trained_scenario"), std::string("cannot use it: ") + e.what());
        }
        const auto arm = std::find_if(trained.arms.begin(), trained.arms.end(),
                                      [&](const ArmSpec& a) { return a.name == out.trained_arm; });
        if (arm == trained.arms.end()) {
          at.fail(sub("trained_arm"),
                  "arm " + quote(out.trained_arm) + " is not in " + quote(out.trained_scenario));
        }
        // Retention is measured by the synthetic suite's summary metrics (runner.h type_breakdown).
        if (arm->setup.env().name() != "synthetic" || arm->setup.view() != "symbolic") {
          at.fail(sub("trained_arm"),
                  "arm " + quote(out.trained_arm) + " of " + quote(out.trained_scenario) + " runs " +
                      quote(arm->setup.env().name()) + " in the " + arm->setup.view() +
                      " view, which measures no summary retention (only the synthetic suite in the symbolic "
                      "view does; an accuracy is not a retention)");
        }
      }
    } else if (m.has_keep_rate() || !m.trained_scenario().empty() || !m.retention_results().empty()) {
      at.fail(
          sub(m.has_keep_rate() ? "keep_rate"
                                : (m.trained_scenario().empty() ? "retention_results" : "trained_scenario")),
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

}  // namespace crl::scenarios
