#include "scenarios/ablation_table.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "engine/error.h"
#include "scenarios/report.h"
#include "scenarios/statistics.h"

namespace crl::scenarios {

namespace {

// Percentage points with a sign ("+3.21", "-0.50", "0.00").
std::string points(double share) {
  const double v = 100.0 * share;
  if (v == 0.0 || std::fabs(v) < 0.005) return "0.00";
  return (v > 0 ? "+" : "") + format_fixed(v, 2);
}
std::string percent_digits(double share) {
  return format_fixed(100.0 * share, 1);
}
std::string p_text(double p) {
  return p < 0.001 ? std::string("< 0.001") : format_fixed(p, 3);
}

const ArmResult* arm_named(const ScenarioResult& result, const std::string& name) {
  for (const ArmResult& a : result.arms) {
    if (a.name == name) return &a;
  }
  return nullptr;
}
const ArmSpec* spec_named(const ScenarioSpec& spec, const std::string& name) {
  for (const ArmSpec& a : spec.arms) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

// The table's columns: the task types (in the order of the first arm that has any), then overall.
std::vector<std::string> type_columns(const ScenarioResult& result) {
  for (const ArmResult& a : result.arms) {
    if (!a.types.empty()) {
      std::vector<std::string> out;
      for (const TypeResult& t : a.types) out.push_back(t.type);
      return out;
    }
  }
  return {};
}

// The per-seed values of one column (a type's exact match, or the overall accuracy when `type` is empty), in
// seed order; nullopt when a seed lacks the type.
std::optional<std::vector<double>> per_seed(const ArmResult& arm, const std::string& type) {
  std::vector<double> out;
  for (const SeedResult& s : arm.seeds) {
    if (type.empty()) {
      out.push_back(s.accuracy);
      continue;
    }
    const auto it =
        std::find_if(s.types.begin(), s.types.end(), [&](const TypeResult& t) { return t.type == type; });
    if (it == s.types.end()) return std::nullopt;
    out.push_back(it->exact_match);
  }
  return out;
}

// Why two arms cannot be paired by (seed, task), or "" when they can: the same seeds in the same order, and
// the same evaluation episodes (environment, evaluation parameters, number of evaluation episodes).
std::string unpaired_reason(const ScenarioSpec& spec, const ArmResult& a, const ArmResult& b) {
  if (a.seeds.size() != b.seeds.size()) return "different numbers of seeds";
  for (size_t i = 0; i < a.seeds.size(); ++i) {
    if (a.seeds[i].seed != b.seeds[i].seed) return "different seeds";
  }
  const ArmSpec* x = spec_named(spec, a.name);
  const ArmSpec* y = spec_named(spec, b.name);
  if (x == nullptr || y == nullptr) return "";
  auto eval_params = [](const ArmSpec& arm) {
    std::map<std::string, std::string> p = env_params(arm.setup);
    for (const auto& [k, v] : arm.setup.training().eval_env_params()) p[k] = v;
    return p;
  };
  if (x->setup.env().name() != y->setup.env().name()) return "different environments";
  if (eval_params(*x) != eval_params(*y)) return "different evaluation tasks (environment parameters differ)";
  if (x->setup.training().eval_episodes() != y->setup.training().eval_episodes()) {
    return "different numbers of evaluation episodes";
  }
  return "";
}

std::string interval_cell(const Interval& i) {
  return percent_digits(i.mean) + " [" + percent_digits(i.lo) + ", " + percent_digits(i.hi) + "]";
}

}  // namespace

std::string format_ablation_table(const ScenarioSpec& spec, const ScenarioResult& result) {
  if (!spec.has_table) return "";
  const std::string& ref_name = spec.table.reference_arm();
  const ArmResult* reference = arm_named(result, ref_name);
  std::vector<std::string> types = type_columns(result);
  std::vector<std::string> columns = types;
  columns.push_back("");  // overall
  auto heading = [](const std::string& column) { return column.empty() ? std::string("overall") : column; };

  std::ostringstream out;
  out << "\n## Ablation table (the paper's Table 4 layout)\n\n"
      << "Held-out " << (types.empty() ? "accuracy" : "exact match per task type and overall accuracy")
      << ", in %: the mean over seeds and its 95% percentile-bootstrap interval [lo, hi] over seeds ("
      << kBootstrapResamples << " resamples, fixed seed; scenarios/statistics.h). The seed is the unit: each "
      << "seed trains its own policy.\n\n| arm |";
  for (const std::string& c : columns) out << " " << heading(c) << " |";
  out << " seeds |\n|---|";
  for (size_t i = 0; i <= columns.size(); ++i) out << "---|";
  out << "\n";
  for (const ArmResult& arm : result.arms) {
    out << "| " << arm.name << (arm.name == ref_name ? " (reference)" : "") << " |";
    for (const std::string& c : columns) {
      const auto values = per_seed(arm, c);
      out << " " << (values ? interval_cell(bootstrap_mean_ci(*values)) : std::string("-")) << " |";
    }
    out << " " << arm.seeds.size() << " |\n";
  }

  // The ablations: the listed ones, else every other arm.
  std::vector<std::string> ablations(spec.table.ablation_arms().begin(), spec.table.ablation_arms().end());
  if (ablations.empty()) {
    for (const ArmResult& a : result.arms) {
      if (a.name != ref_name) ablations.push_back(a.name);
    }
  }
  out << "\n### Each ablation against `" << ref_name << "` (paired by seed and task)\n\n";
  if (reference == nullptr) {
    out << "Not computed: the reference arm `" << ref_name << "` is not in the results.\n";
    return out.str();
  }
  out << "Each cell: the mean over seeds of " << ref_name
      << " - ablation in percentage points (positive: the "
      << "paper's direction, the full method ahead), its 95% bootstrap interval, and the exact two-sided "
         "sign "
         "test's p-value over seeds (ties dropped). Both arms are evaluated on the same held-out episodes "
         "for "
         "each seed, so each seed's difference is the mean of its per-task differences.\n\n| ablation |";
  for (const std::string& c : columns) out << " " << heading(c) << " |";
  out << " seeds " << ref_name << " ahead / behind / tied (overall) |\n|---|";
  for (size_t i = 0; i <= columns.size(); ++i) out << "---|";
  out << "\n";
  std::vector<std::string> sentences;
  for (const std::string& name : ablations) {
    const ArmResult* arm = arm_named(result, name);
    out << "| " << name << " |";
    if (arm == nullptr) {
      for (size_t i = 0; i <= columns.size(); ++i) out << " - |";
      out << "\n";
      sentences.push_back("- **" + name + "**: not in the results, so not compared.");
      continue;
    }
    const std::string reason = unpaired_reason(spec, *reference, *arm);
    std::optional<PairedComparison> overall;
    for (const std::string& c : columns) {
      const auto r = per_seed(*reference, c);
      const auto a = per_seed(*arm, c);
      if (!reason.empty() || !r || !a) {
        out << " not paired |";
        continue;
      }
      // reference - ablation: the paired comparison of the reference with the ablation as its "arm".
      const PairedComparison cmp = paired_comparison(*r, *a);
      out << " " << points(cmp.difference.mean) << " [" << points(cmp.difference.lo) << ", "
          << points(cmp.difference.hi) << "] p " << p_text(cmp.p_value) << " |";
      if (c.empty()) overall = cmp;
    }
    if (overall) {
      out << " " << overall->positive << " / " << overall->negative << " / " << overall->ties << " |\n";
    } else {
      out << " - |\n";
    }
    // The sentence, from the overall comparison's numbers only.
    std::ostringstream s;
    s << "- **" << name << "**: ";
    if (!overall) {
      s << "not compared with " << ref_name << ": " << (reason.empty() ? "no overall accuracy" : reason)
        << ".";
    } else {
      const PairedComparison& c = *overall;
      const bool significant = c.p_value < 0.05;
      const double d = c.difference.mean;
      if (d > 0.0) {
        s << "the paper's direction (" << ref_name << " > " << name << ") holds here: " << ref_name
          << " is ahead by " << format_fixed(100.0 * d, 2) << " points overall";
      } else if (d < 0.0) {
        s << "the paper's direction (" << ref_name << " > " << name << ") does not hold here: " << name
          << " is ahead by " << format_fixed(-100.0 * d, 2) << " points overall";
      } else {
        s << "the paper's direction (" << ref_name << " > " << name
          << ") does not hold here: the two arms score the same overall";
      }
      s << " (95% CI " << points(c.difference.lo) << " to " << points(c.difference.hi) << "; " << ref_name
        << " ahead on " << c.positive << ", behind on " << c.negative << ", tied on " << c.ties << " of "
        << c.difference.n << " seeds; sign test p = " << p_text(c.p_value) << "), ";
      if (c.positive + c.negative == 0) {
        s << "so there is nothing to test.";
      } else if (significant) {
        s << "significant at 0.05.";
      } else {
        s << "not significant at 0.05.";
      }
    }
    sentences.push_back(s.str());
  }
  out << "\n";
  for (const std::string& s : sentences) out << s << "\n";
  return out.str();
}

}  // namespace crl::scenarios
