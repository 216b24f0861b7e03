#include "scenarios/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/trace.h"
#include "envs/registry.h"
#include "scenarios/ablation_table.h"
#include "scenarios/output_set.h"
#include "scenarios/runner.h"
#include "scenarios/statistics.h"
#include "scenarios/summary_curves.h"

namespace crl::scenarios {

namespace {

using proto::scenario::LearnerConfig;

std::string fixed(double value, int digits) {
  if (std::isnan(value)) return "";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}
// A learning rate as %g writes it (0.0003, 0.5, 1e-05): a fixed number of decimals printed the 3e-4 actor
// rate of synthetic_tinylm_reasoning as "0.000".
std::string rate(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}
std::string percent(double value) {
  return fixed(100.0 * value, 2) + "%";
}

const ArmResult* find_arm(const ScenarioResult& result, const std::string& name) {
  for (const ArmResult& arm : result.arms) {
    if (arm.name == name) return &arm;
  }
  return nullptr;
}

// Escapes text for SVG/XML.
std::string xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// "on", "off", or "on (execution segments only)" / "on (summary segments only)": the learner's own names
// (learners/options.h), through the runner's mapping of the file's fields.
std::string correction_text(const learners::LearnerOptions& o) {
  if (!o.correction) return "off";
  if (o.correction_segments == learners::CorrectionSegments::kAll) return "on";
  return "on (" + std::string(learners::correction_segments_name(o.correction_segments)) + " segments only)";
}

std::string lambda_text(const LearnerConfig& l) {
  if (l.lambda_mode() == LearnerConfig::ADAPTIVE) {
    return "adaptive (1 - 1/(" + fixed(l.lambda_alpha(), 2) + " L_s))";
  }
  if (l.lambda_mode() == LearnerConfig::TOKENWISE) {
    return "tokenwise (1 - 1/(" + fixed(l.lambda_alpha(), 2) + " L_s) per segment)";
  }
  return "fixed " + fixed(l.lambda(), 3);
}

// The first curve point at which the mean accuracy over seeds reaches `level` ("never" if none does).
std::string episodes_to(const ArmResult& arm, double level) {
  if (arm.seeds.empty()) return "never";
  size_t points = arm.seeds.front().curve.size();
  for (const SeedResult& s : arm.seeds) points = std::min(points, s.curve.size());
  for (size_t i = 0; i < points; ++i) {
    double mean = 0.0;
    for (const SeedResult& s : arm.seeds)
      mean += s.curve[i].eval_accuracy / static_cast<double>(arm.seeds.size());
    if (mean >= level) return std::to_string(arm.seeds.front().curve[i].episode);
  }
  return "never";
}

}  // namespace

std::string format_fixed(double value, int digits) {
  return fixed(value, digits);
}
std::string xml_escape(const std::string& text) {
  return xml(text);
}
double ratio_or_zero(double a, double b) {
  return b > 0 ? a / b : 0.0;
}
void PercentPlot::header(std::ostream& out, const std::string& title) {
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" viewBox=\"0 0 " << kWidth << " " << kHeight
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out << "<text x=\"" << kLeft + kPlotWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
      << xml(title) << "</text>\n";
}
void PercentPlot::open(std::ostream& out, const std::string& title) {
  header(out, title);
  for (int i = 0; i <= 4; ++i) {
    const double a = i / 4.0;
    out << "<line x1=\"" << kLeft << "\" y1=\"" << y(a) << "\" x2=\"" << kLeft + kPlotWidth << "\" y2=\""
        << y(a) << "\" stroke=\"#dddddd\"/>\n";
    out << "<text x=\"" << kLeft - 8 << "\" y=\"" << y(a) + 4 << "\" text-anchor=\"end\">" << i * 25
        << "%</text>\n";
  }
}

void PercentPlot::frame(std::ostream& out, const std::string& x_label, const std::string& y_label) {
  out << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kPlotWidth << "\" height=\""
      << kPlotHeight << "\" fill=\"none\" stroke=\"black\"/>\n";
  out << "<text x=\"" << kLeft + kPlotWidth / 2 << "\" y=\"" << kHeight - 15 << "\" text-anchor=\"middle\">"
      << xml(x_label) << "</text>\n";
  out << "<text transform=\"translate(18," << kTop + kPlotHeight / 2
      << ") rotate(-90)\" text-anchor=\"middle\">" << xml(y_label) << "</text>\n";
}

const char* plot_color(size_t series) {
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                  "#9467bd", "#8c564b", "#17becf"};
  return kColors[series % (sizeof(kColors) / sizeof(kColors[0]))];
}

std::vector<GateResult> evaluate_gates(const ScenarioSpec& spec, const ScenarioResult& result) {
  std::vector<GateResult> gates;
  const auto& g = spec.gates;
  const bool any = g.has_min_mean() || g.has_min_seed() || g.has_min_gap() || g.has_chance_band() ||
                   g.has_min_type_ratio() || g.has_min_type_gap();
  if (!any) return gates;
  const ArmResult* main = find_arm(result, g.main_arm());
  const ArmResult* control = find_arm(result, g.control_arm());
  auto missing = [&](const std::string& arm, const std::string& what) {
    const bool selected =
        std::any_of(spec.arms.begin(), spec.arms.end(), [&](const ArmSpec& a) { return a.name == arm; });
    if (selected) {
      gates.push_back(GateResult{what, 0.0, false, "arm " + quote(arm) + " is not in the results"});
    } else {
      gates.push_back(GateResult{what, 0.0, false, "arm " + quote(arm) + " was not run (--arms)", true});
    }
  };
  if (g.has_min_mean()) {
    const std::string name = g.main_arm() + " mean accuracy >= " + percent(g.min_mean());
    if (main == nullptr) {
      missing(g.main_arm(), name);
    } else {
      gates.push_back(GateResult{name, main->mean_accuracy, main->mean_accuracy >= g.min_mean(),
                                 percent(main->mean_accuracy)});
    }
  }
  if (g.has_min_seed()) {
    const std::string name = "every " + g.main_arm() + " seed >= " + percent(g.min_seed());
    if (main == nullptr) {
      missing(g.main_arm(), name);
    } else {
      double lowest = 1.0;
      uint64_t which = 0;
      for (const SeedResult& s : main->seeds) {
        if (s.accuracy <= lowest) {
          lowest = s.accuracy;
          which = s.seed;
        }
      }
      gates.push_back(GateResult{name, lowest, lowest >= g.min_seed(),
                                 "lowest " + percent(lowest) + " (seed " + std::to_string(which) + ")"});
    }
  }
  if (g.has_min_gap()) {
    const std::string name =
        g.main_arm() + " - " + g.control_arm() + " >= " + fixed(100.0 * g.min_gap(), 1) + " points";
    if (main == nullptr || control == nullptr) {
      missing(main == nullptr ? g.main_arm() : g.control_arm(), name);
    } else {
      const double gap = main->mean_accuracy - control->mean_accuracy;
      gates.push_back(GateResult{name, gap, gap >= g.min_gap(), fixed(100.0 * gap, 2) + " points"});
    }
  }
  if (g.has_chance_band()) {
    const std::string name =
        g.control_arm() + " within " + fixed(100.0 * g.chance_band(), 1) + " points of chance (1/fact_arity)";
    if (control == nullptr) {
      missing(g.control_arm(), name);
    } else if (std::isnan(control->chance)) {
      gates.push_back(GateResult{name, 0.0, false, "the environment declares no fact_arity"});
    } else {
      const double distance = std::fabs(control->mean_accuracy - control->chance);
      gates.push_back(GateResult{name, distance, distance <= g.chance_band(),
                                 percent(control->mean_accuracy) + " vs chance " + percent(control->chance)});
    }
  }
  // Per task type: the main arm against the reference arm (ratio) and against the control (gap).
  auto type_of = [](const ArmResult* arm, const std::string& type) -> const TypeResult* {
    if (arm == nullptr) return nullptr;
    for (const TypeResult& t : arm->types) {
      if (t.type == type) return &t;
    }
    return nullptr;
  };
  if (g.has_min_type_ratio()) {
    const ArmResult* reference = find_arm(result, g.reference_arm());
    const std::string base = g.main_arm() + " >= " + fixed(100.0 * g.min_type_ratio(), 0) + "% of " +
                             g.reference_arm() + " exact match";
    if (main == nullptr || reference == nullptr || main->types.empty()) {
      missing(main == nullptr ? g.main_arm() : g.reference_arm(), base + " (per type)");
    } else {
      for (const TypeResult& t : main->types) {
        const TypeResult* r = type_of(reference, t.type);
        if (r == nullptr) {
          gates.push_back(GateResult{
              base + " on " + t.type, 0.0, false,
              "type " + quote(t.type) + " is missing from arm " + quote(g.reference_arm()) + "'s results"});
          continue;
        }
        // A ratio against a reference that scores 0 says nothing (the old code passed it as ratio 1): the
        // gate fails and says why.
        if (!(r->exact_match > 0.0)) {
          gates.push_back(
              GateResult{base + " on " + t.type, 0.0, false,
                         percent(t.exact_match) + " vs " + percent(r->exact_match) + ": the reference arm " +
                             quote(g.reference_arm()) +
                             " scores 0, so the ratio is undefined (a ratio gate needs a reference "
                             "that solves the type)"});
          continue;
        }
        const double ratio = t.exact_match / r->exact_match;
        gates.push_back(GateResult{
            base + " on " + t.type, ratio, ratio >= g.min_type_ratio(),
            percent(t.exact_match) + " vs " + percent(r->exact_match) + " (ratio " + fixed(ratio, 3) + ")"});
      }
    }
  }
  if (g.has_min_type_gap()) {
    for (const std::string& type : g.gap_types()) {
      const std::string name = g.main_arm() + " - " + g.control_arm() +
                               " >= " + fixed(100.0 * g.min_type_gap(), 1) + " points on " + type;
      const TypeResult* m = type_of(main, type);
      const TypeResult* c = type_of(control, type);
      if (m == nullptr || c == nullptr) {
        gates.push_back(GateResult{name, 0.0, false, "type " + quote(type) + " is missing from the results"});
        continue;
      }
      const double gap = m->exact_match - c->exact_match;
      gates.push_back(GateResult{name, gap, gap >= g.min_type_gap(),
                                 fixed(100.0 * gap, 2) + " points (" + percent(m->exact_match) + " vs " +
                                     percent(c->exact_match) + ")"});
    }
  }
  return gates;
}

bool all_pass(const std::vector<GateResult>& gates) {
  return std::all_of(gates.begin(), gates.end(), [](const GateResult& g) { return g.pass || g.skipped; });
}

std::string gates_verdict(const std::vector<GateResult>& gates) {
  const auto skipped = static_cast<size_t>(
      std::count_if(gates.begin(), gates.end(), [](const GateResult& g) { return g.skipped; }));
  if (skipped == gates.size()) return "not evaluated (their arms were not run)";
  std::string out = all_pass(gates) ? "PASS" : "FAIL";
  if (skipped > 0)
    out += " (" + std::to_string(skipped) + " of " + std::to_string(gates.size()) +
           " skipped: their arms were not run)";
  return out;
}

std::string format_summary_json(const ScenarioResult& result) {
  nlohmann::ordered_json doc;
  doc["scenario"] = result.name;
  doc["arms"] = nlohmann::ordered_json::array();
  for (const ArmResult& arm : result.arms) {
    nlohmann::ordered_json a;
    a["name"] = arm.name;
    a["mean_accuracy"] = arm.mean_accuracy;
    a["seeds"] = nlohmann::ordered_json::array();
    for (const SeedResult& s : arm.seeds) {
      nlohmann::ordered_json seed;
      seed["seed"] = s.seed;
      seed["accuracy"] = s.accuracy;
      seed["episodes"] = s.episodes;
      seed["eval_episodes"] = s.eval_episodes;
      for (const TypeResult& t : s.types) seed["exact_match"][t.type] = t.exact_match;
      a["seeds"].push_back(seed);
    }
    if (!arm.types.empty()) {
      nlohmann::ordered_json types = nlohmann::ordered_json::object();
      for (const TypeResult& t : arm.types) {
        nlohmann::ordered_json x;
        x["episodes"] = t.episodes;
        x["exact_match"] = t.exact_match;
        x["summaries_per_episode"] = t.summaries_per_episode;
        x["recall"] = t.recall;
        x["invention"] = t.invention;
        x["repetition"] = t.repetition;
        x["summary_length"] = t.length;
        x["plan_token_f1"] = t.f1;
        types[t.type] = x;
      }
      a["types"] = types;
    }
    doc["arms"].push_back(a);
  }
  return doc.dump(2) + "\n";
}

std::string format_curves_csv(const ScenarioResult& result) {
  std::ostringstream out;
  // The PPO columns: the actor updates since the previous point and their measurements (runner.h).
  // The summary columns: the point's summaries, all task types pooled (runner.h CurvePoint::summaries);
  // empty where they are not measured.
  out << "arm,seed,episode,train_reward,eval_accuracy,eval_episodes,ppo_updates,mean_abs_ratio,max_ratio,"
         "clip_fraction,approx_kl,entropy,summaries_per_episode,summary_length,summary_recall,"
         "summary_invention,summary_repetition\n";
  for (const ArmResult& arm : result.arms) {
    for (const SeedResult& s : arm.seeds) {
      for (const CurvePoint& p : s.curve) {
        out << arm.name << ',' << s.seed << ',' << p.episode << ',' << fixed(p.train_reward, 6) << ','
            << fixed(p.eval_accuracy, 6) << ',' << p.eval_episodes << ',' << p.ppo_updates << ','
            << fixed(p.mean_abs_ratio, 6) << ',' << fixed(p.max_ratio, 6) << ',' << fixed(p.clip_fraction, 6)
            << ',' << fixed(p.approx_kl, 8) << ',' << fixed(p.entropy, 6);
        const TypeResult& m = p.summaries;
        const double measured = m.episodes > 0 ? 1.0 : NAN;
        out << ',' << fixed(measured * m.summaries_per_episode, 4) << ',' << fixed(measured * m.length, 4)
            << ',' << fixed(measured * m.recall, 6) << ',' << fixed(measured * m.invention, 6) << ','
            << fixed(measured * m.repetition, 6) << '\n';
      }
    }
  }
  return out.str();
}

std::string format_curves_svg(const ScenarioResult& result) {
  // x = training episodes, y = held-out accuracy in [0, 1].
  using P = PercentPlot;
  int64_t max_episode = 1;
  for (const ArmResult& arm : result.arms) {
    for (const SeedResult& s : arm.seeds) {
      for (const CurvePoint& p : s.curve) max_episode = std::max(max_episode, p.episode);
    }
  }
  auto x = [&](double episode) {
    return P::kLeft + P::kPlotWidth * episode / static_cast<double>(max_episode);
  };
  auto y = [&](double accuracy) { return P::y(accuracy); };

  std::ostringstream out;
  P::open(out, result.name + ": held-out accuracy (mean over seeds, 95% bootstrap band)");
  for (int i = 0; i <= 5; ++i) {
    const double e = max_episode * i / 5.0;
    out << "<line x1=\"" << x(e) << "\" y1=\"" << P::kTop + P::kPlotHeight << "\" x2=\"" << x(e) << "\" y2=\""
        << P::kTop + P::kPlotHeight + 5 << "\" stroke=\"black\"/>\n";
    out << "<text x=\"" << x(e) << "\" y=\"" << P::kTop + P::kPlotHeight + 20 << "\" text-anchor=\"middle\">"
        << static_cast<int64_t>(std::llround(e)) << "</text>\n";
  }
  P::frame(out, "training episodes", "held-out accuracy");

  // Chance level, when every arm agrees on it.
  double chance = result.arms.empty() ? NAN : result.arms.front().chance;
  for (const ArmResult& arm : result.arms) {
    if (!(arm.chance == chance)) chance = NAN;
  }
  // One band and one mean line per arm. Seeds of an arm share their curve's episodes.
  out << "<g id=\"curves\">\n";
  for (size_t a = 0; a < result.arms.size(); ++a) {
    const ArmResult& arm = result.arms[a];
    const char* color = plot_color(a);
    if (arm.seeds.empty()) continue;
    size_t points = arm.seeds.front().curve.size();
    for (const SeedResult& s : arm.seeds) points = std::min(points, s.curve.size());
    // The band: the 95% percentile-bootstrap interval of the mean over seeds at each point
    // (scenarios/statistics.h; one seed gives a band of width 0).
    std::vector<double> lo(points, 1.0), hi(points, 0.0), mean(points, 0.0), episode(points, 0.0);
    for (size_t i = 0; i < points; ++i) {
      episode[i] = static_cast<double>(arm.seeds.front().curve[i].episode);
      std::vector<double> values;
      for (const SeedResult& s : arm.seeds) values.push_back(s.curve[i].eval_accuracy);
      const Interval ci = bootstrap_mean_ci(values);
      lo[i] = ci.lo;
      hi[i] = ci.hi;
      mean[i] = ci.mean;
    }
    out << "<polygon fill=\"" << color << "\" fill-opacity=\"0.18\" stroke=\"none\" points=\"";
    for (size_t i = 0; i < points; ++i) out << fixed(x(episode[i]), 2) << "," << fixed(y(hi[i]), 2) << " ";
    for (size_t i = points; i-- > 0;) out << fixed(x(episode[i]), 2) << "," << fixed(y(lo[i]), 2) << " ";
    out << "\"/>\n";
    out << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < points; ++i) out << fixed(x(episode[i]), 2) << "," << fixed(y(mean[i]), 2) << " ";
    out << "\"><title>" << xml(arm.name) << ": final mean " << percent(arm.mean_accuracy)
        << "</title></polyline>\n";
  }
  out << "</g>\n";
  if (!std::isnan(chance)) {
    out << "<line x1=\"" << P::kLeft << "\" y1=\"" << y(chance) << "\" x2=\"" << P::kLeft + P::kPlotWidth
        << "\" y2=\"" << y(chance) << "\" stroke=\"#777777\" stroke-dasharray=\"5,4\"/>\n";
  }
  // Legend.
  const double lx = P::kLeft + P::kPlotWidth + 16;
  out << "<g id=\"legend\">\n<text x=\"" << lx << "\" y=\"" << P::kTop + 4
      << "\" font-weight=\"bold\">arms</text>\n";
  double ly = P::kTop + 24;
  for (size_t a = 0; a < result.arms.size(); ++a) {
    const char* color = plot_color(a);
    out << "<rect x=\"" << lx << "\" y=\"" << ly - 9 << "\" width=\"22\" height=\"10\" fill=\"" << color
        << "\" fill-opacity=\"0.18\"/>\n";
    out << "<line x1=\"" << lx << "\" y1=\"" << ly - 4 << "\" x2=\"" << lx + 22 << "\" y2=\"" << ly - 4
        << "\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n";
    out << "<text x=\"" << lx + 28 << "\" y=\"" << ly << "\">" << xml(result.arms[a].name) << " ("
        << percent(result.arms[a].mean_accuracy) << ")</text>\n";
    ly += 20;
  }
  if (!std::isnan(chance)) {
    out << "<line x1=\"" << lx << "\" y1=\"" << ly - 4 << "\" x2=\"" << lx + 22 << "\" y2=\"" << ly - 4
        << "\" stroke=\"#777777\" stroke-dasharray=\"5,4\"/>\n";
    out << "<text x=\"" << lx + 28 << "\" y=\"" << ly << "\">chance (" << percent(chance) << ")</text>\n";
    ly += 20;
  }
  out << "<text x=\"" << lx << "\" y=\"" << ly + 6 << "\" fill=\"#555555\">line: mean over seeds</text>\n";
  out << "<text x=\"" << lx << "\" y=\"" << ly + 22 << "\" fill=\"#555555\">band: 95% bootstrap CI</text>\n";
  out << "</g>\n</svg>\n";
  return out.str();
}

std::string format_report(const ScenarioSpec& spec, const ScenarioResult& result,
                          const std::string& command) {
  std::ostringstream out;
  out << "# Scenario `" << result.name << "`\n\n";
  if (!spec.description.empty()) out << spec.description << "\n\n";
  out << "Produced by `" << command << "` (scenario file `" << spec.path
      << "`). Accuracy is the mean reward over "
      << "held-out evaluation episodes (tasks `eval-<i>`, never trained on), sampled from the policy as in "
         "training.\n\n";

  out << "## Arms\n\n| arm | policy | learner | training |\n|---|---|---|---|\n";
  for (const ArmSpec& arm : spec.arms) {
    const auto& s = arm.setup;
    const auto& l = s.learner();
    const auto& t = s.training();
    std::string policy = s.policy().name();
    for (const auto& [k, v] : policy_params(s)) policy += " " + k + "=" + v;
    out << "| " << arm.name << " | " << policy << " | gamma " << fixed(l.gamma(), 3) << ", lambda "
        << lambda_text(l) << ", correction " << correction_text(learner_options(l)) << ", critic target "
        << learners::critic_target_name(learner_options(l).critic_target)
        << (l.summary_loss_masked() ? ", summary loss masked" : "") << ", warm-up " << l.warmup_batches()
        << " batches, " << l.critic_per_actor() << " critic : 1 actor, LR actor " << rate(l.actor_lr())
        << " / critic " << rate(l.critic_lr()) << " | " << t.episodes() << " episodes, batch "
        << t.batch_size() << ", eval " << t.eval_episodes() << " episodes, every " << t.eval_interval()
        << " |\n";
  }
  out << "\nEnvironment: `" << spec.arms.front().setup.env().name() << "`";
  for (const auto& [k, v] : env_params(spec.arms.front().setup)) out << " " << k << "=" << v;
  out << ", view " << spec.arms.front().setup.view() << ".\n";
  for (const ArmSpec& arm : spec.arms) {
    if (!arm.description.empty()) out << "- **" << arm.name << "**: " << arm.description << "\n";
  }

  out << "\n## Results (held-out accuracy)\n\n| arm |";
  std::vector<uint64_t> seeds;
  for (const ArmResult& arm : result.arms) {
    for (const SeedResult& s : arm.seeds) {
      if (std::find(seeds.begin(), seeds.end(), s.seed) == seeds.end()) seeds.push_back(s.seed);
    }
  }
  for (uint64_t seed : seeds) out << " seed " << seed << " |";
  out << " mean | episodes to 90% |\n|---|";
  for (size_t i = 0; i <= seeds.size() + 1; ++i) out << "---|";
  out << "\n";
  for (const ArmResult& arm : result.arms) {
    out << "| " << arm.name << " |";
    for (uint64_t seed : seeds) {
      std::string cell = "-";
      for (const SeedResult& s : arm.seeds) {
        if (s.seed == seed) cell = percent(s.accuracy);
      }
      out << " " << cell << " |";
    }
    out << " **" << percent(arm.mean_accuracy) << "** | " << episodes_to(arm, 0.9) << " |\n";
  }
  out << "\n\"Episodes to 90%\": the first curve point where the mean held-out accuracy over seeds reaches "
         "90%. "
         "Curves: `curves.csv`, `curves.svg` (bands: 95% bootstrap intervals of the mean over seeds). The "
         "wall "
         "time and thread count of the run are in `runtime.txt` beside this file when `crl run` wrote it "
         "(kept out of this report, so that the report is the same bytes for any thread count, after a "
         "resume "
         "and after `crl merge`).\n";

  // Per task type, for environments with typed tasks (final evaluation, mean over seeds).
  if (std::any_of(result.arms.begin(), result.arms.end(),
                  [](const ArmResult& a) { return !a.types.empty(); })) {
    out << "\n## Per task type (final evaluation, mean over seeds)\n\n"
           "| arm | type | exact match | summaries / episode | milestone recall | invention | repetition | "
           "summary length | plan-token F1 |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const ArmResult& arm : result.arms) {
      for (const TypeResult& t : arm.types) {
        out << "| " << arm.name << " | " << t.type << " | " << percent(t.exact_match) << " | "
            << fixed(t.summaries_per_episode, 2) << " | " << percent(t.recall) << " | "
            << percent(t.invention) << " | " << percent(t.repetition) << " | " << fixed(t.length, 2) << " | "
            << fixed(t.f1, 3) << " |\n";
      }
    }
    out << "\nSummary metrics per summary (envs/synthetic/metrics.h): recall = observed milestones kept; "
           "invention = kept answer-domain values that are not observed milestones (distractors, records not "
           "seen yet); repetition = a milestone named twice; length in symbols up to and including STOP "
           "(symbolic "
           "view) or in tokens of the view's tokenizer, the end of turn included (text view). Arms without "
           "compaction write no summary.\n";
  }

  out << format_summaries_section(result);
  out << format_ablation_table(spec, result);

  const std::vector<GateResult> gates = evaluate_gates(spec, result);
  if (!gates.empty()) {
    out << "\n## Gates\n\n| gate | measured | result |\n|---|---|---|\n";
    for (const GateResult& g : gates) {
      out << "| " << g.name << " | " << g.detail << " | "
          << (g.skipped ? "skipped"
              : g.pass  ? "PASS"
                        : "FAIL")
          << " |\n";
    }
    out << "\nOverall: **" << gates_verdict(gates) << "**";
    if (spec.gates.has_chance_band()) {
      out << " (the chance band is |mean - 1/fact_arity| <= " << fixed(100.0 * spec.gates.chance_band(), 1)
          << " points)";
    }
    out << "\n";
  }

  // The correction factors each arm applied, read off its traced episode: for the memory chain the segments
  // are sum_0, sum_1, sum_2, exec_3 with one sampled token each, so lambda_s and N_after are visible here.
  out << "\n## Credit reaching each segment\n\nThe factor (gamma lambda_s)^N_after(s) multiplying each "
         "segment's "
         "local advantage, from each arm's traced episode (segments in order; a 1-token segment has adaptive "
         "lambda_s = 1 - 1/1.5 = 1/3):\n\n";
  for (const ArmResult& arm : result.arms) {
    for (const SeedResult& s : arm.seeds) {
      if (!s.has_example) continue;
      out << "- " << arm.name << ":";
      for (size_t i = 0; i < s.example.segments.size() && i < s.example_factors.size(); ++i) {
        const Segment& seg = s.example.segments[i];
        out << " " << (seg.kind == SegmentKind::kSummary ? "sum" : "exec") << "(N_after " << seg.n_after
            << ") " << fixed(s.example_factors[i], 4) << ";";
      }
      out << "\n";
      break;
    }
  }
  if (!spec.notes.empty()) out << "\n## Notes\n\n" << spec.notes << "\n";

  // One rewarded evaluation episode of the first arm that has one (gates' main arm first).
  const ArmResult* shown = find_arm(result, spec.gates.main_arm());
  if (shown == nullptr || std::none_of(shown->seeds.begin(), shown->seeds.end(),
                                       [](const SeedResult& s) { return s.has_example; })) {
    shown = nullptr;
    for (const ArmResult& arm : result.arms) {
      for (const SeedResult& s : arm.seeds) {
        if (s.has_example && shown == nullptr) shown = &arm;
      }
    }
  }
  if (shown != nullptr) {
    for (const SeedResult& s : shown->seeds) {
      if (!s.has_example) continue;
      const Trajectory& t = s.example;
      out << "\n## A successful evaluation episode (arm " << shown->name << ", seed " << s.seed << ")\n\n";
      // The fact, when the environment shows one as "FACT <value>" in the first prompt.
      const std::string first = shown->codec->decode(t.segments.front().prompt_ids);
      const bool chain = !std::isnan(shown->chance);  // the memory chain (it declares a fact_arity)
      if (const size_t at = first.find("FACT "); chain && at != std::string::npos) {
        const size_t end = first.find(' ', at + 5);
        out << "The fact shown at step 1: "
            << first.substr(at + 5, end == std::string::npos ? end : end - at - 5) << ". ";
      }
      out << (chain
                  ? "What each summary kept (the memory symbol carried across the reset; a learned code, not "
                    "necessarily a copy):"
                  : "What each summary wrote:");
      int k = 0;
      for (const Segment& seg : t.segments) {
        if (seg.kind == SegmentKind::kSummary) {
          out << " summary " << k++ << " \"" << shown->codec->decode(seg.response_ids) << "\";";
        }
      }
      // The answer: the sampled tokens of the last execution segment (the rest of it is forced steps).
      std::vector<TokenId> answer;
      const Segment& last = t.segments.back();
      for (size_t i = 0; i < last.response_ids.size(); ++i) {
        if (last.actor_mask[i]) answer.push_back(last.response_ids[i]);
      }
      out << " answer \"" << shown->codec->decode(answer) << "\", reward " << fixed(t.reward, 0) << ".\n";
      const ArmSpec* arm_spec = nullptr;
      for (const ArmSpec& a : spec.arms) {
        if (a.name == shown->name) arm_spec = &a;
      }
      if (arm_spec != nullptr) {
        const auto params = Params::resolve(env_registry().entry(arm_spec->setup.env().name()).params,
                                            env_params(arm_spec->setup), "report");
        if (params.values().count("reset_points")) {
          const int64_t period = params.values().count("reset_period") ? params.get_int("reset_period") : 0;
          out << "The context was rebuilt " << t.compactions << (t.compactions == 1 ? " time" : " times")
              << ", after the environment's reset points ("
              << (period > 0 ? "every " + std::to_string(period) + " steps"
                             : "after steps " + params.get_string("reset_points"))
              << "): each rebuilt window is system + resume(summary) + the newest "
              << arm_spec->setup.budget().tail_k()
              << " steps, shown below as copied_summary and copied_tail.\n";
        }
      }
      out << "Execution windows with only forced `continue` actions have no trainable token and are not "
             "emitted.\n";
      const Decoder decode = [&](std::span<const TokenId> ids) { return shown->codec->decode(ids); };
      out << "\n```\n" << format_trace(t, decode) << "```\n";
      break;
    }
  }
  return out.str();
}

void write_results(const std::string& dir, const ScenarioSpec& spec, const ScenarioResult& result,
                   const std::string& command) {
  // One set: a reader never finds a mix of two runs' files without the INCOMPLETE marker (output_set.h).
  std::vector<std::pair<std::string, std::string>> files = {
      {"summary.json", format_summary_json(result)},
      {"curves.csv", format_curves_csv(result)},
      {"curves.svg", format_curves_svg(result)},
      {"report.md", format_report(spec, result, command)}};
  if (has_summary_curves(result)) files.emplace_back("summaries.svg", format_summaries_svg(result));
  publish_files(dir, files);
}

}  // namespace crl::scenarios
