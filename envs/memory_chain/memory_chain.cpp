#include "envs/memory_chain/memory_chain.h"

#include <algorithm>
#include <sstream>

#include "engine/error.h"
#include "envs/registry.h"

namespace crl {

Budget memory_chain_symbolic_budget() {
  Budget b;
  b.capacity = 256;
  b.reserve = 16;
  b.per_turn_cap = 4;
  b.summary_cap = 4;
  return b;
}

MemoryChain::MemoryChain(MemoryChainConfig config) : config_(std::move(config)), spec_(make_spec(config_)) {}

std::vector<ParamSpec> MemoryChain::param_specs() {
  return {
      {"length", ParamType::kInt, "96", "steps per episode, the fact at step 1 and the question at the last"},
      {"reset_points", ParamType::kString, "24,48,72",
       "steps after which the context is compacted (comma list)"},
      {"reset_period", ParamType::kInt, "0",
       "if > 0, reset after every multiple of this (overrides reset_points)"},
      {"fact_arity", ParamType::kInt, "2", "number of fact values"},
      {"distractors", ParamType::kBool, "true", "iid distractor values on steps 2 .. length-1"},
  };
}

MemoryChainConfig MemoryChain::config_from(const Params& params) {
  MemoryChainConfig c;
  c.length = static_cast<int>(params.get_int_at_least("length", 2));
  c.fact_arity = static_cast<int>(params.get_int("fact_arity"));
  c.distractors = params.get_bool("distractors");
  const std::string where = "environment \"memory_chain\"";
  if (c.fact_arity < 2 || c.fact_arity > 64) {
    throw Error(where, "fact_arity", "value " + std::to_string(c.fact_arity) + " is outside 2 .. 64");
  }
  c.reset_points.clear();
  if (const int64_t period = params.get_int("reset_period"); period > 0) {
    for (int64_t s = period; s < c.length; s += period) c.reset_points.push_back(static_cast<int>(s));
  } else {
    std::stringstream list(params.get_string("reset_points"));
    std::string item;
    while (std::getline(list, item, ',')) {
      if (item.empty()) continue;
      int point = 0;
      try {
        point = std::stoi(item);
      } catch (...) {
        throw Error(where, "reset_points", "value " + quote(item) + " is not an integer");
      }
      if (point < 1 || point >= c.length) {
        throw Error(where, "reset_points", "step " + item + " is outside 1 .. length-1");
      }
      c.reset_points.push_back(point);
    }
    std::sort(c.reset_points.begin(), c.reset_points.end());
  }
  return c;
}

EnvSpec MemoryChain::make_spec(const MemoryChainConfig& config) {
  EnvSpec spec;
  spec.name = "memory_chain";
  spec.description = "a fact at step 1, distractors, the question at the last step; resets in between";
  spec.params = param_specs();
  spec.has_text = true;
  // Text view (byte tokens): a step costs about 44 tokens and the summary instruction about 350, so a window
  // of 24 steps plus the summary request fits C - summary_cap and every compaction comes from the chain's
  // reset points (the `crl run` demo).
  spec.text_budget = Budget{2560, 768, 2, 64, 256, 3};
  spec.symbols = {"SYSTEM", "FACT", "NOISE", "QUERY", "CONTINUE", "EMPTY", "SUMMARIZE", "RESUME", "CUT"};
  for (int v = 0; v < config.fact_arity; ++v) spec.symbols.push_back("V" + std::to_string(v));
  spec.symbolic_template.summary_instruction = {kMcSummarize};
  spec.symbolic_template.resume_prefix = {kMcResume};
  spec.symbolic_template.truncation_marker = {kMcCut};
  return spec;
}

MemoryChain::Start MemoryChain::do_reset(const Task&, Rng& rng) {
  values_.assign(config_.length, 0);
  fact_ = static_cast<int>(rng.uniform_int(config_.fact_arity));
  values_[0] = fact_;
  for (int s = 1; s < config_.length - 1; ++s) {
    values_[s] = config_.distractors ? static_cast<int>(rng.uniform_int(config_.fact_arity)) : 0;
  }
  step_ = 1;
  Start start;
  std::ostringstream system;
  system
      << "Memory chain of " << config_.length << " steps. Step 1 shows a FACT (a value 0.."
      << config_.fact_arity - 1
      << "); later steps show noise. At every step reply `continue`, until the last step asks for the fact: "
         "then reply `answer <value>`.";
  start.system.text = system.str();
  start.system.symbols = {kMcSystem};
  start.user = observe(1);
  return start;
}

Observation MemoryChain::observe(int step) const {
  Observation o;
  const int value = values_[step - 1];
  if (step == 1) {
    o.text = "step 1: FACT " + std::to_string(value);
    o.symbols = {kMcFact, kMcValue0 + value};
  } else if (step == config_.length) {
    o.text = "step " + std::to_string(step) + ": QUESTION which FACT was shown at step 1?";
    o.symbols = {kMcQuery};
  } else {
    o.text = "step " + std::to_string(step) + ": noise " + std::to_string(value);
    o.symbols = {kMcNoise, kMcValue0 + value};
  }
  return o;
}

StepResult MemoryChain::do_step(const Action& action) {
  StepResult result;
  if (step_ == config_.length) {
    // The answer: a value symbol, or the text "answer <v>".
    int answer = -1;
    if (action.symbols.size() == 1 && action.symbols[0] >= kMcValue0 &&
        action.symbols[0] < kMcValue0 + config_.fact_arity) {
      answer = action.symbols[0] - kMcValue0;
    }
    if (action.text.rfind("answer ", 0) == 0) {
      try {
        answer = std::stoi(action.text.substr(7));
      } catch (...) {
        answer = -1;
      }
    }
    result.reward = answer == fact_ ? 1.0 : 0.0;
    result.terminated = true;
    result.observation.text = answer == fact_ ? "correct" : "wrong";
    result.info = "answer " + std::to_string(answer) + ", fact " + std::to_string(fact_);
    return result;
  }
  // Every step before the question advances, whatever the action: only the answer is graded.
  if (std::binary_search(config_.reset_points.begin(), config_.reset_points.end(), step_)) {
    result.request_compaction = true;
  }
  ++step_;
  result.observation = observe(step_);
  return result;
}

namespace {
const EnvRegistrar kMemoryChainRegistrar({"memory_chain", "the 96-step memory chain (spec section 2)",
                                          MemoryChain::param_specs(),
                                          [](const Params& params) -> std::unique_ptr<Env> {
                                            return std::make_unique<MemoryChain>(
                                                MemoryChain::config_from(params));
                                          }});
}  // namespace

}  // namespace crl
