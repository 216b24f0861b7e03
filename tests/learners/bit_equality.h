#pragma once
// What the learner's bit-identity tests share: the learner switches they sweep over, and comparisons of
// doubles by their bits (the CPU kernels promise the same bits across instruction sets and between the
// fused step and the separate calls, not just close numbers).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "learners/learner.h"

namespace crl::learners::testing {

struct Variant {
  const char* name;
  LearnerOptions options;
};

// Every switch of the learner at least once (learner.h, options.h).
inline std::vector<Variant> variants() {
  std::vector<Variant> out;
  out.push_back({"paper defaults", {}});
  LearnerOptions o;
  o.lambda_mode = LambdaMode::kFixed;
  o.lambda = 0.9;
  o.gamma = 0.99;
  out.push_back({"fixed lambda, gamma 0.99", o});
  o = {};
  o.lambda_mode = LambdaMode::kTokenwise;
  o.critic_target = CriticTarget::kCorrected;
  out.push_back({"tokenwise lambda, corrected target", o});
  o = {};
  o.critic_target = CriticTarget::kStitched;
  o.gamma = 0.97;
  out.push_back({"stitched target, gamma 0.97", o});
  o = {};
  o.critic_target = CriticTarget::kStitched;
  o.correction = false;
  out.push_back({"stitched target, no correction", o});
  o = {};
  o.correction_segments = CorrectionSegments::kExecution;
  o.critic_target = CriticTarget::kCorrected;
  out.push_back({"correction on execution segments only, corrected target", o});
  o = {};
  o.correction_segments = CorrectionSegments::kSummary;
  o.lambda_mode = LambdaMode::kTokenwise;
  out.push_back({"correction on summary segments only, tokenwise lambda", o});
  o = {};
  o.summary_loss_masked = true;
  o.token_level_normalization = false;
  out.push_back({"summary loss masked, per-segment means", o});
  o = {};
  o.positive_only = true;
  o.kl_coef = 0.05;
  o.value_clip = 0.2;
  out.push_back({"positive only, k3 KL, value clip", o});
  o = {};
  o.whiten_advantages = true;
  out.push_back({"whitening", o});
  o = {};
  o.whiten_advantages = true;
  o.positive_only = true;
  out.push_back({"whitening, positive only", o});
  return out;
}

inline bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof(double)) == 0;
}

inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  // (memcmp is not given the null data() of empty vectors)
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// The first token where two arrays differ in bits, for failure messages.
inline std::string first_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    if (!same_bits(a[t], b[t]))
      return "token " + std::to_string(t) + ": " + std::to_string(a[t]) + " vs " + std::to_string(b[t]);
  }
  return "none";
}

// Every field of two loss results, bit for bit.
inline void expect_same(const LossResult& a, const LossResult& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.policy_loss, b.policy_loss))
      << what << ": " << a.policy_loss << " vs " << b.policy_loss;
  EXPECT_TRUE(same_bits(a.kl, b.kl)) << what;
  EXPECT_TRUE(same_bits(a.actor_loss, b.actor_loss)) << what;
  EXPECT_TRUE(same_bits(a.value_loss, b.value_loss))
      << what << ": " << a.value_loss << " vs " << b.value_loss;
  EXPECT_TRUE(same_bits(a.clip_fraction, b.clip_fraction)) << what;
  EXPECT_TRUE(same_bits(a.value_clip_fraction, b.value_clip_fraction)) << what;
}

}  // namespace crl::learners::testing
