#pragma once
// The viewer's data: trajectories (their export records, PROTOCOL.md section 1), the text of every token id
// they use, and optionally per-token advantages, as one JSON document the page reads (ui/viewer.js):
//
//   {"version": 1, "source": "t.jsonl", "advantages_source": "result.json" | "" ,
//    "vocabs": [{"<id>": "<text of that one token>", ...}, ...],
//    "rollouts": [{"vocab": 0 | -1, "segments": [<export record>, ...],
//                  "advantages": [{"advantages": [...], "returns": [...], "values": [...], "lambda": x,
//                                  "factor": x, "n_after": n}, ...]  (one per segment; absent without)}]}
//
// The advantages come from `crl advantages`'s result.json (learners/batch_json.h) or are computed by the
// caller; either way they are checked against the trajectories' shapes here, and a mismatch is an error
// naming both counts.
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/token.h"
#include "engine/trajectory.h"

namespace crl::ui {

struct SegmentAdvantages {
  std::vector<double> advantages, returns, values;  // one per response token
  double lambda = 0.0;
  double factor = 1.0;  // the correction factor (gamma * lambda_s)^N_after(s)
  int64_t n_after = 0;
};

struct RolloutAdvantages {
  std::string id;  // may be empty (then rollouts are matched by position)
  std::vector<SegmentAdvantages> segments;
};

struct AdvantageTable {
  std::string source;  // shown on the page: a file name, or how the advantages were computed
  std::vector<RolloutAdvantages> rollouts;
};

// Reads `crl advantages`'s result document. `where` names the file in errors. Throws crl::Error.
AdvantageTable parse_advantages_result(const std::string& text, const std::string& where);

// Turns a run of token ids into readable text; given one id at a time to label each token.
using TokenDecoder = std::function<std::string(std::span<const TokenId>)>;

struct ViewerInput {
  std::string source;  // the trajectory file, shown on the page
  std::vector<Trajectory> trajectories;
  // One per trajectory (or empty: ids are shown). Trajectories with the same decoder_key share one vocab.
  std::vector<TokenDecoder> decoders;
  std::vector<std::string> decoder_keys;
  std::optional<AdvantageTable> advantages;
};

// The data document (plain JSON; ui/viewer_page.h makes it script-safe). Throws crl::Error when the
// advantages do not match the trajectories (rollout, segment or token counts; both numbers named).
std::string viewer_data_json(const ViewerInput& input);

}  // namespace crl::ui
