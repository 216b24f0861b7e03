#include "scenarios/summary_curves.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "scenarios/report.h"
#include "scenarios/statistics.h"

namespace crl::scenarios {

namespace {

// The points every seed of the arm has (seeds of an arm share their curve's episodes).
size_t shared_points(const ArmResult& arm) {
  if (arm.seeds.empty()) return 0;
  size_t points = arm.seeds.front().curve.size();
  for (const SeedResult& s : arm.seeds) points = std::min(points, s.curve.size());
  return points;
}

// An arm is drawn when every seed's points are measured and it wrote at least one summary somewhere.
bool wrote_summaries(const ArmResult& arm) {
  const size_t points = shared_points(arm);
  bool any = false;
  for (size_t i = 0; i < points; ++i) {
    for (const SeedResult& s : arm.seeds) {
      if (s.curve[i].summaries.episodes == 0) return false;
      any = any || s.curve[i].summaries.summaries_per_episode > 0.0;
    }
  }
  return any;
}

// The values of one metric over the arm's seeds at point i.
template <typename Metric>
std::vector<double> over_seeds(const ArmResult& arm, size_t i, Metric metric) {
  std::vector<double> values;
  for (const SeedResult& s : arm.seeds) values.push_back(metric(s.curve[i].summaries));
  return values;
}

double mean(const std::vector<double>& values) {
  double total = 0.0;
  for (double v : values) total += v;
  return values.empty() ? 0.0 : total / static_cast<double>(values.size());
}

// A y axis from 0 to a round maximum at or above `top` (1, 2 or 5 times a power of ten).
double round_up(double top) {
  if (!(top > 0.0)) return 1.0;
  const double power = std::pow(10.0, std::floor(std::log10(top)));
  for (double step : {1.0, 2.0, 5.0, 10.0}) {
    if (step * power >= top) return step * power;
  }
  return 10.0 * power;
}

}  // namespace

bool has_summary_curves(const ScenarioResult& result) {
  return std::any_of(result.arms.begin(), result.arms.end(), wrote_summaries);
}

std::string format_summaries_svg(const ScenarioResult& result) {
  using P = PercentPlot;
  auto length = [](const TypeResult& t) { return t.length; };
  int64_t max_episode = 1;
  double top = 0.0;
  for (const ArmResult& arm : result.arms) {
    if (!wrote_summaries(arm)) continue;
    for (size_t i = 0; i < shared_points(arm); ++i) {
      max_episode = std::max(max_episode, arm.seeds.front().curve[i].episode);
      for (double v : over_seeds(arm, i, length)) top = std::max(top, v);
    }
  }
  const double y_max = round_up(top);
  auto x = [&](double episode) {
    return P::kLeft + P::kPlotWidth * episode / static_cast<double>(max_episode);
  };
  auto y = [&](double value) { return P::y(value / y_max); };

  std::ostringstream out;
  P::header(out, result.name + ": summary length over training (mean over seeds, 95% bootstrap band)");
  for (int i = 0; i <= 4; ++i) {
    const double v = y_max * i / 4.0;
    out << "<line x1=\"" << P::kLeft << "\" y1=\"" << y(v) << "\" x2=\"" << P::kLeft + P::kPlotWidth
        << "\" y2=\"" << y(v) << "\" stroke=\"#dddddd\"/>\n";
    out << "<text x=\"" << P::kLeft - 8 << "\" y=\"" << y(v) + 4 << "\" text-anchor=\"end\">"
        << format_fixed(v, y_max >= 4.0 ? 0 : 2) << "</text>\n";
  }
  for (int i = 0; i <= 5; ++i) {
    const double e = max_episode * i / 5.0;
    out << "<text x=\"" << x(e) << "\" y=\"" << P::kTop + P::kPlotHeight + 20 << "\" text-anchor=\"middle\">"
        << static_cast<int64_t>(std::llround(e)) << "</text>\n";
  }
  P::frame(out, "training episodes", "mean summary length");
  out << "<g id=\"summary-length\">\n";
  const double lx = P::kLeft + P::kPlotWidth + 16;
  double ly = P::kTop + 24;
  std::ostringstream legend;
  for (size_t a = 0; a < result.arms.size(); ++a) {
    const ArmResult& arm = result.arms[a];
    if (!wrote_summaries(arm)) continue;
    const char* color = plot_color(a);  // the same colour as the arm's accuracy curve
    const size_t points = shared_points(arm);
    std::vector<Interval> ci(points);
    for (size_t i = 0; i < points; ++i) ci[i] = bootstrap_mean_ci(over_seeds(arm, i, length));
    auto at = [&](size_t i, double v) {
      return format_fixed(x(static_cast<double>(arm.seeds.front().curve[i].episode)), 2) + "," +
             format_fixed(y(v), 2) + " ";
    };
    out << "<polygon fill=\"" << color << "\" fill-opacity=\"0.18\" stroke=\"none\" points=\"";
    for (size_t i = 0; i < points; ++i) out << at(i, ci[i].hi);
    for (size_t i = points; i-- > 0;) out << at(i, ci[i].lo);
    out << "\"/>\n<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < points; ++i) out << at(i, ci[i].mean);
    out << "\"><title>" << xml_escape(arm.name) << "</title></polyline>\n";
    legend << "<line x1=\"" << lx << "\" y1=\"" << ly - 4 << "\" x2=\"" << lx + 22 << "\" y2=\"" << ly - 4
           << "\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n<text x=\"" << lx + 28 << "\" y=\"" << ly
           << "\">" << xml_escape(arm.name) << "</text>\n";
    ly += 20;
  }
  out << "</g>\n<g id=\"legend\">\n<text x=\"" << lx << "\" y=\"" << P::kTop + 4
      << "\" font-weight=\"bold\">arms</text>\n"
      << legend.str() << "</g>\n</svg>\n";
  return out.str();
}

std::string format_summaries_section(const ScenarioResult& result) {
  if (!has_summary_curves(result)) return "";
  std::ostringstream out;
  out << "\n## Summaries over training (the paper's Fig. 4)\n\n"
         "At every curve point, the summaries written in that point's evaluation episodes, all task types "
         "pooled, mean over seeds (`summaries.svg`: the length with 95% bootstrap bands; `curves.csv`: every "
         "seed). Metrics as in the per-type table above.\n\n"
         "| arm | episodes trained | held-out accuracy | summaries / episode | summary length | milestone "
         "recall "
         "| invention | repetition |\n|---|---|---|---|---|---|---|---|\n";
  for (const ArmResult& arm : result.arms) {
    if (!wrote_summaries(arm)) continue;
    for (size_t i = 0; i < shared_points(arm); ++i) {
      std::vector<double> accuracy;
      for (const SeedResult& s : arm.seeds) accuracy.push_back(s.curve[i].eval_accuracy);
      auto metric = [&](auto field, double scale, int digits) {
        return format_fixed(scale * mean(over_seeds(arm, i, field)), digits);
      };
      out << "| " << arm.name << " | " << arm.seeds.front().curve[i].episode << " | "
          << format_fixed(100.0 * mean(accuracy), 2) << "% | "
          << metric([](const TypeResult& t) { return t.summaries_per_episode; }, 1.0, 2) << " | "
          << metric([](const TypeResult& t) { return t.length; }, 1.0, 2) << " | "
          << metric([](const TypeResult& t) { return t.recall; }, 100.0, 2) << "% | "
          << metric([](const TypeResult& t) { return t.invention; }, 100.0, 2) << "% | "
          << metric([](const TypeResult& t) { return t.repetition; }, 100.0, 2) << "% |\n";
    }
  }
  return out.str();
}

}  // namespace crl::scenarios
