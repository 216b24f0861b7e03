#include "scenarios/statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/error.h"

namespace crl::scenarios {

namespace {

double mean_of(const std::vector<double>& values) {
  double sum = 0.0;
  for (double v : values) sum += v;  // index order: the same bits every time
  return sum / static_cast<double>(values.size());
}

}  // namespace

double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double h = (static_cast<double>(sorted.size()) - 1.0) * q;
  const size_t below = static_cast<size_t>(std::floor(h));
  if (below + 1 >= sorted.size()) return sorted.back();
  return sorted[below] + (h - static_cast<double>(below)) * (sorted[below + 1] - sorted[below]);
}

Interval bootstrap_mean_ci(const std::vector<double>& values, int resamples, uint64_t seed) {
  Interval out;
  out.n = values.size();
  if (values.empty()) {
    out.mean = out.lo = out.hi = std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  out.mean = mean_of(values);
  if (values.size() == 1 || resamples < 1) {
    out.lo = out.hi = out.mean;
    return out;
  }
  SplitMix64 rng{seed};
  std::vector<double> means(static_cast<size_t>(resamples));
  for (double& m : means) {
    double sum = 0.0;
    for (size_t i = 0; i < values.size(); ++i) sum += values[rng.index(values.size())];
    m = sum / static_cast<double>(values.size());
  }
  std::sort(means.begin(), means.end());
  out.lo = quantile_sorted(means, 0.025);
  out.hi = quantile_sorted(means, 0.975);
  return out;
}

double sign_test_p(int64_t positive, int64_t n) {
  if (n <= 0) return 1.0;
  const int64_t k = std::min(positive, n - positive);
  // sum_{i <= k} C(n, i) / 2^n. Up to 1000 seeds by the recursion C(n, i) = C(n, i-1) (n-i+1) / i from
  // 2^-n (exact for small n: 2^-n and the products are dyadic rationals that doubles hold); beyond, 2^-n
  // underflows, so each term is computed in log space.
  double tail = 0.0;
  if (n <= 1000) {
    double term = std::ldexp(1.0, -static_cast<int>(n));
    for (int64_t i = 0; i <= k; ++i) {
      if (i > 0) term = term * static_cast<double>(n - i + 1) / static_cast<double>(i);
      tail += term;
    }
  } else {
    for (int64_t i = 0; i <= k; ++i) {
      tail +=
          std::exp(std::lgamma(static_cast<double>(n) + 1.0) - std::lgamma(static_cast<double>(i) + 1.0) -
                   std::lgamma(static_cast<double>(n - i) + 1.0) - static_cast<double>(n) * std::log(2.0));
    }
  }
  return std::min(1.0, 2.0 * tail);
}

PairedComparison paired_comparison(const std::vector<double>& arm, const std::vector<double>& reference,
                                   int resamples, uint64_t seed) {
  if (arm.size() != reference.size()) {
    throw Error("paired comparison", "",
                std::to_string(arm.size()) + " values against " + std::to_string(reference.size()) +
                    " reference values (the two arms must have the same seeds)");
  }
  PairedComparison out;
  std::vector<double> differences;
  for (size_t i = 0; i < arm.size(); ++i) {
    const double d = arm[i] - reference[i];
    differences.push_back(d);
    if (d > 0.0) {
      ++out.positive;
    } else if (d < 0.0) {
      ++out.negative;
    } else {
      ++out.ties;
    }
  }
  out.difference = bootstrap_mean_ci(differences, resamples, seed);
  out.p_value = sign_test_p(out.positive, out.positive + out.negative);
  return out;
}

}  // namespace crl::scenarios
