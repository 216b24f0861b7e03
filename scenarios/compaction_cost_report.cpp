// The compaction-cost study's outputs (scenarios/compaction_cost.h): report.md answers the questions in a
// sentence each, summary.json and strategies.csv hold every number, cost_vs_success.svg plots them.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "scenarios/compaction_cost.h"
#include "scenarios/report.h"

namespace crl::scenarios {

namespace {

std::string pct(double v) {
  return format_fixed(100.0 * v, 1) + "%";
}
std::string sec(double v) {
  if (v >= 100) return format_fixed(v, 0) + " s";
  if (v >= 1) return format_fixed(v, 2) + " s";
  return format_fixed(v * 1000.0, 1) + " ms";
}

// Training wall-clock per successful trained rollout, split into inference and trainer time.
std::string per_success_split(const StrategyResult& r) {
  if (!std::isfinite(r.seconds_per_success)) return "no task solved";
  const double total = r.batch_inference_seconds + r.batch_trainer_seconds;
  const double share = total > 0 ? r.batch_inference_seconds / total : 0.0;
  return sec(r.seconds_per_success) + " = " + sec(r.seconds_per_success * share) + " inference + " +
         sec(r.seconds_per_success * (1.0 - share)) + " trainer";
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
    // Every learned-vs-frozen number apart: time waiting for rollouts (the inference server) and the
    // trainer's step, per training step (means over the steps: inference + trainer = the mean batch time).
    const double li = learned->batch_inference_seconds, lt = learned->batch_trainer_seconds;
    const double fi = frozen->batch_inference_seconds, ft = frozen->batch_trainer_seconds;
    const double saved = (fi + ft) - (li + lt);
    auto change = [&](double frozen_s, double learned_s) {
      const double d = frozen_s - learned_s;
      return std::string(d >= 0 ? "saves " : "costs ") + sec(std::fabs(d)) + " (" +
             format_fixed(std::fabs(100.0 * ratio_or_zero(d, frozen_s)), 1) + "% of the frozen one's)";
    };
    auto keep = [&](const StrategyResult& r) {
      for (const SummarizerSpec& m : result.summarizers) {
        if (m.name == r.strategy->summarizer) return format_fixed(m.keep_rate, 4);
      }
      return std::string("?");
    };
    out << "- **Does a learned summarizer save wall-clock time over a frozen one?** "
        << (saved > 0 ? "Yes" : "No") << ", with keep rates " << keep(*learned) << " (learned) and "
        << keep(*frozen) << " (frozen) per fact line (table below). Per training step (mean), the learned "
        << "summarizer's step takes " << sec(li + lt) << " = " << sec(li) << " waiting for rollouts on the "
        << "inference server + " << sec(lt) << " of trainer time, against " << sec(fi + ft) << " = "
        << sec(fi) << " + " << sec(ft) << " for the frozen one: in inference time the learned summarizer "
        << change(fi, li) << ", in trainer time it " << change(ft, lt) << "; overall it "
        << change(fi + ft, li + lt) << ". Inference GPU-seconds per trained trajectory "
        << format_fixed(learned->gpu_seconds_per_trajectory, 3) << " vs "
        << format_fixed(frozen->gpu_seconds_per_trajectory, 3) << "; trainer GPU-seconds per step "
        << format_fixed(learned->train_gpu_seconds_per_step, 2) << " vs "
        << format_fixed(frozen->train_gpu_seconds_per_step, 2)
        << " (the trainer's time grows with the trained "
        << "tokens: more turns and summaries cost training too). Rollouts: "
        << format_fixed(learned->turns, 1) << " vs " << format_fixed(frozen->turns, 1) << " turns, "
        << format_fixed(learned->compactions, 2) << " vs " << format_fixed(frozen->compactions, 2)
        << " compactions, p99 rollout " << sec(learned->rollout_seconds.p99) << " vs "
        << sec(frozen->rollout_seconds.p99) << " (inference), "
        << "success " << pct(learned->success) << " vs " << pct(frozen->success)
        << ". Per solved task: " << per_success_split(*learned) << " (learned) vs "
        << per_success_split(*frozen) << " (frozen).\n";
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
         "summarizers differ only by how many fact lines they keep (the rate is given in the file or "
         "measured as the retention of a trained policy's own summaries: the recall of the needed facts per "
         "summary, scenarios/compaction_cost_retention.h), not by what a neural model would write; the "
         "scripted executor's turns are short "
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
    s["batch_inference_seconds_mean"] = r.batch_inference_seconds;
    s["batch_trainer_seconds_mean"] = r.batch_trainer_seconds;
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

}  // namespace crl::scenarios
