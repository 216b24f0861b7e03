#include "learners/options.h"

#include <cmath>

#include "engine/error.h"

namespace crl::learners {

std::string_view lambda_mode_name(LambdaMode mode) {
  switch (mode) {
    case LambdaMode::kAdaptive:
      return "adaptive";
    case LambdaMode::kFixed:
      return "fixed";
    case LambdaMode::kTokenwise:
      return "tokenwise";
  }
  return "?";
}

std::string_view critic_target_name(CriticTarget target) {
  switch (target) {
    case CriticTarget::kLocal:
      return "local";
    case CriticTarget::kCorrected:
      return "corrected";
    case CriticTarget::kStitched:
      return "stitched";
  }
  return "?";
}

std::string_view correction_segments_name(CorrectionSegments segments) {
  switch (segments) {
    case CorrectionSegments::kAll:
      return "all";
    case CorrectionSegments::kExecution:
      return "execution";
    case CorrectionSegments::kSummary:
      return "summary";
  }
  return "?";
}

std::string_view backend_name(Backend backend) {
  return backend == Backend::kCpu ? "cpu" : "cuda";
}

CriticTarget parse_critic_target(const std::string& name, const std::string& where,
                                 const std::string& field) {
  if (name == "local") return CriticTarget::kLocal;
  if (name == "corrected") return CriticTarget::kCorrected;
  if (name == "stitched") return CriticTarget::kStitched;
  throw Error(where, field, "is " + quote(name) + ", expected \"local\", \"corrected\" or \"stitched\"");
}

CorrectionSegments parse_correction_segments(const std::string& name, const std::string& where,
                                             const std::string& field) {
  if (name == "all") return CorrectionSegments::kAll;
  if (name == "execution") return CorrectionSegments::kExecution;
  if (name == "summary") return CorrectionSegments::kSummary;
  throw Error(where, field, "is " + quote(name) + ", expected \"all\", \"execution\" or \"summary\"");
}

Backend parse_backend(const std::string& name, const std::string& where, const std::string& field) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  throw Error(where, field, "is " + quote(name) + ", expected \"cpu\" or \"cuda\"");
}

void validate_options(const LearnerOptions& o, const std::string& where) {
  auto in_unit = [&](double x, const char* field) {
    if (!(x >= 0.0 && x <= 1.0))
      throw Error(where, field, "is " + quote(x) + ", expected a number in [0, 1]");
  };
  in_unit(o.gamma, "gamma");
  in_unit(o.lambda, "lambda");
  // alpha >= 1 keeps lambda_s = 1 - 1/(alpha L) in [0, 1) for every L >= 1.
  if (!(o.lambda_alpha >= 1.0 && std::isfinite(o.lambda_alpha)))
    throw Error(where, "lambda_alpha", "is " + quote(o.lambda_alpha) + ", expected a finite number >= 1");
  if (!(o.clip_epsilon >= 0.0 && o.clip_epsilon < 1.0))
    throw Error(where, "clip_epsilon", "is " + quote(o.clip_epsilon) + ", expected a number in [0, 1)");
  if (!(o.value_clip >= 0.0 && std::isfinite(o.value_clip)))
    throw Error(where, "value_clip",
                "is " + quote(o.value_clip) + ", expected a finite number >= 0 (0 = off)");
  if (!(o.kl_coef >= 0.0 && std::isfinite(o.kl_coef)))
    throw Error(where, "kl_coef", "is " + quote(o.kl_coef) + ", expected a finite number >= 0 (0 = off)");
  if (!(o.whiten_epsilon > 0.0 && std::isfinite(o.whiten_epsilon)))
    throw Error(where, "whiten_epsilon", "is " + quote(o.whiten_epsilon) + ", expected a finite number > 0");
  if (o.ppo_epochs < 1)
    throw Error(where, "ppo_epochs", "is " + std::to_string(o.ppo_epochs) + ", expected an integer >= 1");
  if (o.minibatches < 1)
    throw Error(where, "minibatches", "is " + std::to_string(o.minibatches) + ", expected an integer >= 1");
}

}  // namespace crl::learners
