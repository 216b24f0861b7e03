#include "policies/lm/copy_drills.h"

#include "engine/error.h"
#include "engine/rng.h"

namespace crl::lm {

std::vector<SftExample> copy_drill_examples(int vocab, int max_positions, const CopyDrillOptions& o,
                                            const std::string& where) {
  if (vocab < 2) throw Error(where, "vocab", "must be >= 2 for copy drills, not " + std::to_string(vocab));
  if (o.examples < 1) throw Error(where, "examples", "must be >= 1, not " + std::to_string(o.examples));
  if (o.min_half < 2 || o.max_half < o.min_half)  // a run of 1 has nothing to predict in its repeat
    throw Error(where, "half",
                "must satisfy 2 <= min <= max, not " + std::to_string(o.min_half) + ".." +
                    std::to_string(o.max_half));
  if (o.lead < 0) throw Error(where, "lead", "must be >= 0, not " + std::to_string(o.lead));
  if (o.lead + 2 * o.max_half > max_positions)
    throw Error(where, "half",
                "a drill of " + std::to_string(o.lead + 2 * o.max_half) +
                    " tokens is longer than the model's " + std::to_string(max_positions) + " positions");
  std::vector<SftExample> out(static_cast<size_t>(o.examples));
  for (int i = 0; i < o.examples; ++i) {
    Rng rng(StreamKey{o.seed, static_cast<uint64_t>(i), 0, StreamRole::kLearner, 1});
    const int half =
        o.min_half + static_cast<int>(rng.uniform_int(static_cast<uint32_t>(o.max_half - o.min_half + 1)));
    SftExample& e = out[static_cast<size_t>(i)];
    e.tokens.reserve(static_cast<size_t>(o.lead + 2 * half));
    for (int t = 0; t < o.lead + half; ++t)
      e.tokens.push_back(static_cast<int32_t>(rng.uniform_int(static_cast<uint32_t>(vocab))));
    for (int t = 0; t < half; ++t) e.tokens.push_back(e.tokens[static_cast<size_t>(o.lead + t)]);
    // mask[t] = 1 trains tokens[t + 1]: the repeat's tokens from its second on, i.e. targets at positions
    // lead + half + 1 .. end, so t from lead + half to the second-to-last position.
    e.mask.assign(e.tokens.size(), 0.0f);
    for (size_t t = static_cast<size_t>(o.lead + half); t + 1 < e.tokens.size(); ++t) e.mask[t] = 1.0f;
    e.spans.push_back(o.lead + half + 1);  // the first trained token (sft_examples' convention)
    e.span_kinds.push_back(SftExample::kAction);
  }
  return out;
}

}  // namespace crl::lm
