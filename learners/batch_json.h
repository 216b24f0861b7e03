#pragma once
// The JSON form of a batch, read and written by `crl advantages` (trajectories produced elsewhere):
//
//   {"gamma": 1.0, "lambda": "adaptive" | "tokenwise" | 0.8, "correction": true,
//    "critic_target": "local" | "corrected" | "stitched",
//    optional: "lambda_alpha", "correction_segments" ("all" | "execution" | "summary"),
//              "summary_loss_masked", "whiten", "positive_only",
//    "rollouts": [{"id": optional, "reward": 1.0,
//                  "segments": [{"kind": "execution" | "summary", "values": [...], "actor_mask": [...],
//                                "critic_mask": [...] (optional: the actor mask)}]}]}
//
// with one array entry per response token. The result repeats the structure and adds, per segment,
// "advantages" and "returns" (per token), "n_sampled", "n_after", "lambda" and "factor", plus a
// "diagnostics" object. Every error names the file, the rollout, the segment and the field.
#include <string>

#include "learners/batch.h"
#include "learners/diagnostics.h"
#include "learners/learner.h"
#include "learners/options.h"

namespace crl::learners {

struct AdvantagesRequest {
  LearnerOptions options;
  Batch batch;
};

// `where` names the source in errors (a file path). Throws crl::Error.
AdvantagesRequest parse_advantages_request(const std::string& text, const std::string& where);
// The result document (pretty-printed JSON, ending in a newline).
std::string format_advantages_result(const AdvantagesRequest& request, const Advantages& advantages,
                                     const Diagnostics& diagnostics);

}  // namespace crl::learners
