#pragma once
// How many entries of a result differ from a reference beyond float rounding: the comparison every
// CPU-vs-CUDA and CPU-vs-PyTorch test uses (tests/policies/lm, tests/policies/neural_cuda_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

namespace crl::test {

// Mismatches of ours against a reference: |a - r| > rel |r| + floor, floor = rel * max|ref| / 10 (entries
// tiny next to the tensor's scale are compared absolutely: their relative error is cancellation noise). NaN
// counts as a mismatch. `first` (when given) gets the first one.
inline int mismatches(const std::string& name, const float* ours, const float* ref, size_t n, double rel,
                      std::string* first = nullptr) {
  double scale = 0.0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
  const double floor = rel * scale / 10.0 + 1e-30;
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double diff = std::abs(static_cast<double>(ours[i]) - ref[i]);
    if (!(diff <= rel * std::abs(static_cast<double>(ref[i])) + floor)) {
      if (bad++ == 0 && first != nullptr)
        *first = name + "[" + std::to_string(i) + "]: ours " + std::to_string(ours[i]) + " reference " +
                 std::to_string(ref[i]);
    }
  }
  return bad;
}

}  // namespace crl::test
