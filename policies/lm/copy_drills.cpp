#include "policies/lm/copy_drills.h"

#include <algorithm>

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
  for (const int32_t id : o.alphabet) {
    if (id < 0 || id >= vocab)
      throw Error(
          where, "alphabet",
          "token " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
  const uint32_t choices = static_cast<uint32_t>(o.alphabet.empty() ? vocab : o.alphabet.size());
  if (o.alphabet_size < 0 || static_cast<uint32_t>(o.alphabet_size) > choices)
    throw Error(where, "alphabet size",
                "must be in 0.." + std::to_string(choices) + " (the tokens to draw from), not " +
                    std::to_string(o.alphabet_size));
  auto draw = [&](Rng& rng) {
    const uint32_t i = rng.uniform_int(choices);
    return o.alphabet.empty() ? static_cast<int32_t>(i) : o.alphabet[i];
  };
  std::vector<int32_t> subset;
  std::vector<SftExample> out(static_cast<size_t>(o.examples));
  for (int i = 0; i < o.examples; ++i) {
    Rng rng(StreamKey{o.seed, static_cast<uint64_t>(i), 0, StreamRole::kLearner, 1});
    const int half =
        o.min_half + static_cast<int>(rng.uniform_int(static_cast<uint32_t>(o.max_half - o.min_half + 1)));
    SftExample& e = out[static_cast<size_t>(i)];
    e.tokens.reserve(static_cast<size_t>(o.lead + 2 * half));
    subset.clear();
    while (static_cast<int>(subset.size()) < o.alphabet_size) {  // distinct: rejection (size <= choices)
      const int32_t id = draw(rng);
      if (std::find(subset.begin(), subset.end(), id) == subset.end()) subset.push_back(id);
    }
    for (int t = 0; t < o.lead + half; ++t) {
      e.tokens.push_back(subset.empty() ? draw(rng)
                                        : subset[rng.uniform_int(static_cast<uint32_t>(subset.size()))]);
    }
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

std::vector<int32_t> drill_alphabet(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> out;
  for (const TokenId id : tokenizer.encode(text)) {
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

std::vector<SftExample> copy_drill_mix(int vocab, int max_positions, const CopyDrillStage& stage,
                                       uint64_t seed, const std::string& where) {
  if (stage.mix < 0) throw Error(where, "mix", "must be >= 0 (0: none), not " + std::to_string(stage.mix));
  if (stage.mix == 0) return {};
  CopyDrillOptions drills = stage.drills;
  drills.seed = seed + 2;
  drills.examples = stage.mix;
  return copy_drill_examples(vocab, max_positions, drills, where);
}

std::vector<float> train_copy_drills(LmModel& model, LmOptimizer& optimizer, const CopyDrillStage& stage,
                                     uint64_t seed, int threads, const std::string& where,
                                     const std::function<void(int)>& after_step) {
  if (stage.steps < 0 || stage.batch < 1 || !(stage.lr > 0) || stage.warmup < 0)
    throw Error(where, "steps/batch/lr/warmup",
                "out of range (steps and warm-up >= 0, batch >= 1, lr > 0), got steps " +
                    std::to_string(stage.steps) + ", batch " + std::to_string(stage.batch) + ", lr " +
                    std::to_string(stage.lr) + ", warm-up " + std::to_string(stage.warmup));
  if (stage.steps == 0) return {};
  CopyDrillOptions drills = stage.drills;
  drills.seed = seed;
  if (drills.examples == 0) drills.examples = stage.steps * stage.batch;
  const std::vector<SftExample> examples =
      copy_drill_examples(model.config().vocab, model.config().max_positions, drills, where);
  SftOptions o;
  o.steps = stage.steps;
  o.batch = stage.batch;
  o.lr = stage.lr;
  o.warmup = stage.warmup;
  o.seed = seed + 1;
  o.threads = threads;
  o.after_step = after_step;
  return train_sft(model, optimizer, examples, o);
}

}  // namespace crl::lm
