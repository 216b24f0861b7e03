#include "policies/lm/copy_drills.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "engine/rng.h"

namespace crl::lm {
namespace {

constexpr int kLookupKinds = 3, kLookupKeys = 3, kLookupQuestions = 4, kLookupMaxFiller = 3,
              kLookupMaxValue = 2;
// A drill's distinct tokens: its kinds, keys, separator, question marker, the answer marker in the
// answer's shape, and (at least) four more to draw values and filler from.
int lookup_distinct(bool answer_shape) {
  return kLookupKinds + kLookupKeys + 2 + (answer_shape ? 1 : 0) + 4;
}

CopyDrillOptions short_drills(CopyDrillOptions o) {
  o.max_gap = 0;
  o.lookup_fraction = 0.0;
  return o;
}

int lookup_drill_max_tokens(int max_entries, bool answer_shape) {
  const int question = 4 + kLookupMaxValue + (answer_shape ? kLookupMaxFiller : 0);
  return max_entries * (kLookupMaxFiller + 3 + kLookupMaxValue) + kLookupQuestions * question;
}

template <typename Draw>
SftExample lookup_drill(Rng& rng, int lead, int min_entries, int max_entries, int max_gap, bool answer_shape,
                        const Draw& draw) {
  auto below = [&](int n) { return static_cast<int>(rng.uniform_int(static_cast<uint32_t>(n))); };
  // The roles' tokens, distinct from each other (values and filler may be any token, roles included).
  std::vector<int32_t> roles;
  while (static_cast<int>(roles.size()) < kLookupKinds + kLookupKeys + 2 + (answer_shape ? 1 : 0)) {
    const int32_t id = draw(rng);
    if (std::find(roles.begin(), roles.end(), id) == roles.end()) roles.push_back(id);
  }
  const int32_t separator = roles[kLookupKinds + kLookupKeys], marker = roles[kLookupKinds + kLookupKeys + 1];
  // -1: none (the separator ends a question, as a summary's `code=` does)
  const int32_t answer = answer_shape ? roles[kLookupKinds + kLookupKeys + 2] : -1;
  auto other = [&] {  // a filler or value token: anything but the separator and the markers
    for (;;) {
      const int32_t id = draw(rng);
      if (id != separator && id != marker && id != answer) return id;
    }
  };
  SftExample e;
  for (int t = 0; t < lead; ++t) e.tokens.push_back(other());
  // pair = kind * kLookupKeys + key -> its latest value
  std::vector<std::vector<int32_t>> latest(kLookupKinds * kLookupKeys);
  const int entries = min_entries + below(max_entries - min_entries + 1);
  for (int n = 0; n < entries; ++n) {
    for (int f = below(kLookupMaxFiller + 1); f > 0; --f) e.tokens.push_back(other());
    const int pair = below(kLookupKinds * kLookupKeys);
    e.tokens.push_back(roles[static_cast<size_t>(pair / kLookupKeys)]);
    e.tokens.push_back(roles[static_cast<size_t>(kLookupKinds + pair % kLookupKeys)]);
    e.tokens.push_back(separator);
    std::vector<int32_t>& value = latest[static_cast<size_t>(pair)];
    value.assign(static_cast<size_t>(1 + below(kLookupMaxValue)), 0);
    for (int32_t& id : value) id = other();
    e.tokens.insert(e.tokens.end(), value.begin(), value.end());
  }
  if (max_gap > 0) {  // between the table and the questions
    for (int g = below(max_gap + 1); g > 0; --g) e.tokens.push_back(other());
  }
  std::vector<int> written;
  for (int pair = 0; pair < kLookupKinds * kLookupKeys; ++pair) {
    if (!latest[static_cast<size_t>(pair)].empty()) written.push_back(pair);
  }
  for (size_t n = written.size(); n > 1; --n)  // Fisher-Yates: the questions in a random order
    std::swap(written[n - 1], written[static_cast<size_t>(below(static_cast<int>(n)))]);
  if (written.size() > static_cast<size_t>(kLookupQuestions)) written.resize(kLookupQuestions);
  // In the answer's shape the question names the pair in this drill's order (the suite asks for "the code
  // in the FACT record": key first) and filler precedes the answer marker.
  const bool key_first = answer_shape && below(2) == 1;
  e.mask.assign(e.tokens.size(), 0.0f);
  for (const int pair : written) {
    const int32_t kind = roles[static_cast<size_t>(pair / kLookupKeys)],
                  key = roles[static_cast<size_t>(kLookupKinds + pair % kLookupKeys)];
    e.tokens.push_back(marker);
    e.tokens.push_back(key_first ? key : kind);
    e.tokens.push_back(key_first ? kind : key);
    if (answer_shape) {
      for (int f = below(kLookupMaxFiller + 1); f > 0; --f) e.tokens.push_back(other());
      e.tokens.push_back(answer);
    } else {
      e.tokens.push_back(separator);
    }
    e.mask.resize(e.tokens.size(), 0.0f);
    e.mask.back() = 1.0f;  // the separator's (answer marker's) position predicts the value's first token
    e.spans.push_back(static_cast<int>(e.tokens.size()));
    e.span_kinds.push_back(SftExample::kAction);
    for (const int32_t id : latest[static_cast<size_t>(pair)]) {
      e.tokens.push_back(id);
      e.mask.push_back(1.0f);
    }
    e.mask.back() = 0.0f;  // the value's last token predicts the next question's marker: not trained
  }
  return e;
}

}  // namespace

std::vector<SftExample> copy_drill_examples(int vocab, int max_positions, const CopyDrillOptions& o,
                                            const std::string& where) {
  if (vocab < 2) throw Error(where, "vocab", "must be >= 2 for copy drills, not " + std::to_string(vocab));
  if (o.examples < 1) throw Error(where, "examples", "must be >= 1, not " + std::to_string(o.examples));
  if (o.min_half < 2 || o.max_half < o.min_half)  // a run of 1 has nothing to predict in its repeat
    throw Error(where, "half",
                "must satisfy 2 <= min <= max, not " + std::to_string(o.min_half) + ".." +
                    std::to_string(o.max_half));
  if (o.lead < 0) throw Error(where, "lead", "must be >= 0, not " + std::to_string(o.lead));
  if (o.max_gap < 0) throw Error(where, "gap", "must be >= 0, not " + std::to_string(o.max_gap));
  if (o.lead + 2 * o.max_half + o.max_gap > max_positions)
    throw Error(where, "half",
                "a drill of " + std::to_string(o.lead + 2 * o.max_half + o.max_gap) +
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
  if (!(o.lookup_fraction >= 0.0 && o.lookup_fraction <= 1.0))
    throw Error(where, "lookup fraction", "must be in [0, 1], not " + std::to_string(o.lookup_fraction));
  if (o.lookup_fraction > 0.0) {
    if (o.lookup_min_entries < 1 || o.lookup_max_entries < o.lookup_min_entries)
      throw Error(where, "lookup entries",
                  "must satisfy 1 <= min <= max, not " + std::to_string(o.lookup_min_entries) + ".." +
                      std::to_string(o.lookup_max_entries));
    const int longest =
        o.lead + lookup_drill_max_tokens(o.lookup_max_entries, o.lookup_answer_shape) + o.max_gap;
    if (longest > max_positions)
      throw Error(where, "lookup entries",
                  "a lookup drill of up to " + std::to_string(longest) +
                      " tokens is longer than the model's " + std::to_string(max_positions) + " positions");
  }
  auto draw = [&](Rng& rng) {
    const uint32_t i = rng.uniform_int(choices);
    return o.alphabet.empty() ? static_cast<int32_t>(i) : o.alphabet[i];
  };
  const int distinct = lookup_distinct(o.lookup_answer_shape);
  if (o.lookup_fraction > 0.0 && choices < static_cast<uint32_t>(distinct))
    throw Error(where, "alphabet",
                "a lookup drill draws " + std::to_string(distinct) + " distinct tokens; there are only " +
                    std::to_string(choices) + " to draw from");
  std::vector<int32_t> subset;
  std::vector<SftExample> out(static_cast<size_t>(o.examples));
  for (int i = 0; i < o.examples; ++i) {
    // Drill i is a lookup when the running count of lookups floor(i * fraction) steps up: an exact share,
    // spread evenly, and the repeat drills' streams unchanged by the option.
    if (std::floor((i + 1) * o.lookup_fraction) > std::floor(i * o.lookup_fraction)) {
      Rng rng(StreamKey{o.seed, static_cast<uint64_t>(i), 0, StreamRole::kLearner, 2});
      out[static_cast<size_t>(i)] = lookup_drill(rng, o.lead, o.lookup_min_entries, o.lookup_max_entries,
                                                 o.max_gap, o.lookup_answer_shape, draw);
      continue;
    }
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
    auto token = [&] {
      return subset.empty() ? draw(rng) : subset[rng.uniform_int(static_cast<uint32_t>(subset.size()))];
    };
    for (int t = 0; t < o.lead + half; ++t) e.tokens.push_back(token());
    // The gap (drawn after the run, so that max_gap 0 leaves the drills as they were).
    const int gap =
        o.max_gap > 0 ? static_cast<int>(rng.uniform_int(static_cast<uint32_t>(o.max_gap + 1))) : 0;
    for (int t = 0; t < gap; ++t) e.tokens.push_back(token());
    for (int t = 0; t < half; ++t) e.tokens.push_back(e.tokens[static_cast<size_t>(o.lead + t)]);
    // mask[t] = 1 trains tokens[t + 1]: the repeat's tokens from its second on, i.e. targets at positions
    // lead + half + gap + 1 .. end, so t from lead + half + gap to the second-to-last position.
    const int repeat = o.lead + half + gap;
    e.mask.assign(e.tokens.size(), 0.0f);
    for (size_t t = static_cast<size_t>(repeat); t + 1 < e.tokens.size(); ++t) e.mask[t] = 1.0f;
    e.spans.push_back(repeat + 1);  // the first trained token (sft_examples' convention)
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
  CopyDrillOptions drills = stage.long_steps > 0 ? stage.drills : short_drills(stage.drills);
  drills.seed = seed + 2;
  drills.examples = stage.mix;
  return copy_drill_examples(vocab, max_positions, drills, where);
}

std::vector<float> train_copy_drills(LmModel& model, LmOptimizer& optimizer, const CopyDrillStage& stage,
                                     uint64_t seed, int threads, const std::string& where,
                                     const std::function<void(int)>& after_step, LmBackend backend) {
  if (stage.steps < 0 || stage.long_steps < 0 || stage.batch < 1 || !(stage.lr > 0) || stage.warmup < 0)
    throw Error(where, "steps/long steps/batch/lr/warmup",
                "out of range (steps, long steps and warm-up >= 0, batch >= 1, lr > 0), got steps " +
                    std::to_string(stage.steps) + ", long steps " + std::to_string(stage.long_steps) +
                    ", batch " + std::to_string(stage.batch) + ", lr " + std::to_string(stage.lr) +
                    ", warm-up " + std::to_string(stage.warmup));
  std::vector<float> losses;
  // One stage: `steps` Adam steps on fresh drills from `drill_seed`, minibatches from drill_seed + 1.
  auto run = [&](int steps, bool long_drills, uint64_t drill_seed, int done_before) {
    if (steps == 0) return;
    CopyDrillOptions drills = long_drills ? stage.drills : short_drills(stage.drills);
    drills.seed = drill_seed;
    if (drills.examples == 0) drills.examples = steps * stage.batch;
    const std::vector<SftExample> examples =
        copy_drill_examples(model.config().vocab, model.config().max_positions, drills, where);
    SftOptions o;
    o.steps = steps;
    o.batch = stage.batch;
    o.lr = stage.lr;
    o.warmup = done_before == 0 ? stage.warmup : 0;  // the second stage goes on at the rate reached
    o.seed = drill_seed + 1;
    o.threads = threads;
    o.backend = backend;
    if (after_step) o.after_step = [&](int done) { after_step(done_before + done); };
    const std::vector<float> l = train_sft(model, optimizer, examples, o);
    losses.insert(losses.end(), l.begin(), l.end());
  };
  run(stage.steps, false, seed, 0);
  run(stage.long_steps, true, seed + 3, stage.steps);
  return losses;
}

}  // namespace crl::lm
