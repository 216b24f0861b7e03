#pragma once
// Every switch of the CompactionRL learner (spec sections 1.4 to 1.8). Defaults are the paper's method;
// each ablation of the paper or the reproduction is one field.
#include <string>
#include <string_view>

namespace crl::learners {

// How lambda_s is chosen for segment s.
enum class LambdaMode {
  kAdaptive,   // lambda_s = 1 - 1/(alpha * L_s), L_s = sampled tokens of s (>= 1), alpha = 1.5 [paper]
  kFixed,      // lambda_s = LearnerOptions::lambda for every segment
  kTokenwise,  // adaptive lambda_s inside s, but the correction is prod_{j>s} (gamma lambda_j)^{n_j} [repro]
};

// What the critic is trained towards (the returns).
enum class CriticTarget {
  kLocal,      // G = A_loc + V: the critic predicts the task return, compaction changes only credit [repro]
  kCorrected,  // G = A_hat + V (corrected advantage) [ArkaZhuo]
  kStitched,   // GAE whose non-final segments bootstrap from V(first sampled token of s+1), R only at the end
};

// Which segments the cross-trajectory correction multiplies (spec 1.4; with `correction` on). N_after(s)
// counts every later segment's sampled tokens whatever this says; only where the factor is applied changes.
// kAll is the paper's method; the other two are diagnostics of where the correction's effect comes from
// (scenarios/README.md, "synthetic_tinylm_reasoning"): the segments of the other kind keep their local
// advantage (factor 1).
enum class CorrectionSegments {
  kAll,        // every segment [paper]
  kExecution,  // execution segments only: summaries keep their full local advantage
  kSummary,    // summary segments only: execution segments keep their full local advantage
};

enum class Backend { kCpu, kCuda };

// Whether the correction multiplies a segment (`summary`: a summary segment; else an execution segment).
// constexpr, so the CUDA kernels (cuda/advantage_kernels.cuh) call this same function on the device.
constexpr bool correction_applies(CorrectionSegments segments, bool summary) {
  return segments == CorrectionSegments::kAll || (segments == CorrectionSegments::kSummary) == summary;
}

struct LearnerOptions {
  double gamma = 1.0;
  LambdaMode lambda_mode = LambdaMode::kAdaptive;
  double lambda = 0.95;       // used by kFixed only
  double lambda_alpha = 1.5;  // alpha of the adaptive rule
  bool correction = true;     // false = "w/o cross-trajectory GAE": factor 1
  CorrectionSegments correction_segments = CorrectionSegments::kAll;  // with correction: where it applies
  CriticTarget critic_target = CriticTarget::kLocal;
  bool summary_loss_masked = false;       // "w/o sum.": actor mask 0 on summary tokens, the rest unchanged
  bool token_level_normalization = true;  // false: mean per segment, then mean over segments
  bool whiten_advantages = false;         // (A - mean) / (std + eps) over actor tokens, after the correction
  bool positive_only = false;             // zero actor advantages of rollouts with reward <= 0
  double clip_epsilon = 0.2;              // PPO ratio clip
  double value_clip = 0.0;                // 0 = off; else V is clipped to V_old +- value_clip
  double kl_coef = 0.0;                   // k3 KL to the reference policy; 0 = off
  double whiten_epsilon = 1e-8;
  // PPO passes of one update (spec 1.5 says one epoch; several epochs make the ratio move and the clip bind):
  // a trainer (policies/neural) runs `ppo_epochs` passes over the batch, each over `minibatches` shuffled
  // groups of whole rollouts, one optimizer step per minibatch, every minibatch weighted by the batch's ONE
  // global token denominator (LossNormalizer), so the minibatch gradients of one pass sum to the batch's.
  int ppo_epochs = 1;
  int minibatches = 1;
};

std::string_view lambda_mode_name(LambdaMode mode);
std::string_view critic_target_name(CriticTarget target);
std::string_view correction_segments_name(CorrectionSegments segments);  // "all", "execution", "summary"
std::string_view backend_name(Backend backend);
// Parse the names above; throw crl::Error(where, field, ...) naming the bad value and the accepted ones.
CriticTarget parse_critic_target(const std::string& name, const std::string& where, const std::string& field);
CorrectionSegments parse_correction_segments(const std::string& name, const std::string& where,
                                             const std::string& field);
Backend parse_backend(const std::string& name, const std::string& where, const std::string& field);
// Checks ranges (gamma in [0,1], lambda in [0,1], alpha > 0, epsilons >= 0); throws crl::Error.
void validate_options(const LearnerOptions& options, const std::string& where);

}  // namespace crl::learners
