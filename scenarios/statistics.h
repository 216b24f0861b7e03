#pragma once
// Confidence intervals and paired tests over seeds, for the ablation table of report.md.
//
// The unit of replication is the seed: every seed trains its own policy, and the tasks one policy is
// evaluated on share that policy, so they are not independent draws. Hence:
//  * bootstrap_mean_ci(values): the 95% percentile bootstrap interval of the mean over seeds. `resamples`
//    resamples of n values drawn with replacement (index = floor(u * n), u from a SplitMix64 stream seeded
//    with `seed`, so the interval is a pure function of the values: byte-identical run to run, and computed
//    on one thread whatever the run's thread count); the bounds are the 2.5% and 97.5% quantiles of the
//    sorted resampled means with linear interpolation between order statistics (Hyndman-Fan type 7, numpy's
//    and Python's statistics.quantiles(method="inclusive") default). n = 1 gives [x, x]; n = 0 gives NaN.
//  * paired_comparison(arm, reference): the arms are paired by (seed, task): for each seed both arms were
//    evaluated on the same held-out episodes (same tasks, same samples), so the per-seed mean of the per-task
//    differences is the difference of the two per-seed accuracies. The interval is the bootstrap interval of
//    the mean of those per-seed differences (as above), and the p-value the exact two-sided sign test over
//    seeds: with n seeds whose difference is non-zero (ties, difference exactly 0, are dropped) and k of them
//    positive, p = min(1, 2 * sum_{i <= min(k, n-k)} C(n, i) / 2^n). The sign test assumes nothing about the
//    shape of the differences (accuracies are bounded and often skewed near 0 or 1); its price is power:
//    with n seeds the smallest possible p is 2 / 2^n (0.25 for 3 seeds, 0.0020 for 10).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace crl::scenarios {

inline constexpr int kBootstrapResamples = 10000;
inline constexpr uint64_t kBootstrapSeed = 0x5eed'ab1a'7e00'0001ULL;

struct Interval {
  double mean = 0.0;
  double lo = 0.0;  // 2.5% quantile of the bootstrap means
  double hi = 0.0;  // 97.5% quantile
  size_t n = 0;
};

// The percentile bootstrap 95% interval of the mean of `values` (see above).
Interval bootstrap_mean_ci(const std::vector<double>& values, int resamples = kBootstrapResamples,
                           uint64_t seed = kBootstrapSeed);

// Quantile q in [0, 1] of sorted values, linear interpolation (type 7). Empty: NaN.
double quantile_sorted(const std::vector<double>& sorted, double q);

// The exact two-sided sign test of `positive` successes out of `n` (p = 1 when n = 0).
double sign_test_p(int64_t positive, int64_t n);

struct PairedComparison {
  Interval difference;   // arm - reference, mean over seeds and its bootstrap interval
  int64_t positive = 0;  // seeds where arm > reference
  int64_t negative = 0;  // seeds where arm < reference
  int64_t ties = 0;      // seeds where they are equal
  double p_value = 1.0;  // exact two-sided sign test over the non-tied seeds
};

// `arm` and `reference` hold per-seed values in the same seed order (same length; throws crl::Error
// otherwise).
PairedComparison paired_comparison(const std::vector<double>& arm, const std::vector<double>& reference,
                                   int resamples = kBootstrapResamples, uint64_t seed = kBootstrapSeed);

// The SplitMix64 generator the bootstrap draws from (public so tests can reproduce the draws).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // floor(u * n) with u = next() / 2^64: the high 64 bits of next() * n.
  size_t index(size_t n) { return static_cast<size_t>((static_cast<unsigned __int128>(next()) * n) >> 64); }
};

}  // namespace crl::scenarios
