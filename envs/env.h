#pragma once
// The environment interface (DESIGN.md). An environment is created by name with typed parameters
// (envs/registry.h); the immutable description (EnvSpec) is shared, the per-episode state is the Env object.
//
// An environment never sees summaries or the context: it gets actions and returns observations. Each
// observation has a text rendering (for LLM policies, tokenized by the episode's codec) and, when the
// environment declares a symbolic vocabulary, a symbolic rendering (ids < spec().symbols.size(), for small
// policies). Rewards are summed over the episode into the rollout's one terminal reward.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/budget.h"
#include "engine/error.h"
#include "engine/params.h"
#include "engine/rng.h"
#include "engine/token.h"

namespace crl {

struct Observation {
  std::string text;
  std::vector<TokenId> symbols;
};

struct Action {
  std::string text;
  std::vector<TokenId> symbols;
};

struct Task {
  std::string id;      // stable, printable identifier (e.g. "chain-000042", "syn-default-train-0007")
  uint64_t index = 0;  // position in the task source, for generated tasks
  std::string split;   // "train" | "dev" | "test" | "" (generated on the fly)
  // For an environment with a finite task list (Env::task_list()) and an id that names none of its tasks
  // (a driver's label such as "demo-3", or the server's "dev-3"): false (the default) -> `index` must be
  // below the list's size, else reset() throws crl::Error naming the list and its size; true -> the index-th
  // task modulo the size, for drivers that deliberately run more episodes than there are tasks (a
  // scenario's training and evaluation episodes cycle through the split). Never an alias by accident.
  bool cycle = false;
};

// A finite list of tasks (the synthetic suite's split, the shell's task folders).
struct TaskList {
  std::string name;  // what the list is, for messages: "split \"dev\" (namespace default)"
  uint64_t size = 0;
};

// The error of a task index past the end of `list` (shared by the environments so that every one says it
// the same way): "index 60 is out of range: split "dev" (namespace default) holds 60 tasks (0 .. 59)".
inline std::string task_index_message(uint64_t index, const TaskList& list) {
  return "index " + std::to_string(index) + " is out of range: " + list.name + " holds " +
         std::to_string(list.size) + " tasks" +
         (list.size > 0 ? " (0 .. " + std::to_string(list.size - 1) + ")" : "");
}

struct StepResult {
  Observation observation;
  double reward = 0.0;
  bool terminated = false;  // the task ended (success or failure decided)
  bool truncated = false;   // the environment's own limit ended it (turn limit, too many invalid commands)
  bool request_compaction = false;  // a scripted reset point: compact before the next turn
  // The observation's tokens end with what opens the next assistant turn, which then has no turn header of
  // its own (engine/context.h append_observation): the gateway sets it where the chat template writes no
  // generation prompt after the harness's messages (DeepSeek-V3 after tool results).
  bool opens_turn = false;
  std::string info;  // short free text for traces (e.g. "invalid command")
};

// Symbols with a fixed meaning in the episode's context template, for symbolic environments.
struct SymbolicTemplate {
  std::vector<TokenId> turn_header;
  std::vector<TokenId> summary_instruction;
  std::vector<TokenId> resume_prefix;
  std::vector<TokenId> resume_suffix;
  std::vector<TokenId> truncation_marker;
};

struct EnvSpec {
  std::string name;
  std::string description;
  std::vector<ParamSpec> params;
  bool has_text = true;
  // Longest observation text the environment produces, in bytes (0: unbounded). The conformance battery
  // checks every observation against it.
  size_t max_observation_bytes = 0;
  // Symbolic vocabulary (names of the ids); empty if the environment has no symbolic view.
  std::vector<std::string> symbols;
  SymbolicTemplate symbolic_template;
  // The budgets used when a request or a command line gives none (spec 1.1), per view. Each one fits the
  // environment's first prompt, a turn at the per-turn cap, its summary request and a rebuild with the
  // default tokenizer (Episode::budget_fit; tests/envs/default_budget_test.cpp checks every registered
  // environment). Budget{} is the synthetic suite's symbolic budget of spec section 4.
  Budget text_budget;
  Budget symbolic_budget;
  const Budget& default_budget(const std::string& view) const {
    return view == "symbolic" ? symbolic_budget : text_budget;
  }
};

class Env;

// Batching of steps across environments (DESIGN.md rule 9), an optional hook. A driver that applies the
// actions of many episodes in one round (policies/rollout.cpp drive()) first hands all of them to
// prepare_steps(); environments that return the same StepBatcher (every `remote` environment of one
// endpoint) receive their steps in one prefetch() call, which can send them in one request, and each
// following Env::step() answers from the prefetched result. Environments without a batcher (the default)
// are untouched: their step() does the work as before. A wrapping Env does not forward step_batcher(): the
// batcher answers the Env object that returned it.
struct PendingStep {
  Env* env = nullptr;
  Action action;  // exactly the action the next env->step() will get
};

class StepBatcher {
 public:
  virtual ~StepBatcher() = default;
  // `steps` belong to distinct live environments of this batcher, in the driver's order. Never throws: a
  // failure is kept by each environment and thrown by its next step(), which must follow with the announced
  // action (the remote side may already have applied it).
  virtual void prefetch(std::span<const PendingStep> steps) = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  virtual const EnvSpec& spec() const = 0;
  // The batcher of this environment's steps, or nullptr (default): see StepBatcher.
  virtual StepBatcher* step_batcher() const { return nullptr; }

  // Starts an episode of `task`. Returns the system prompt and the first user observation. Randomness
  // comes only from `rng` (a stream keyed by the episode), so the same task and stream give the same
  // episode. May throw crl::Error for an unknown task.
  struct Start {
    Observation system;
    Observation user;
    bool opens_turn = false;  // the user part opens the first assistant turn (StepResult::opens_turn)
  };
  Start reset(const Task& task, Rng& rng) {
    steps_ = 0;
    done_ = false;
    return do_reset(task, rng);
  }

  // Applies one action. After a result with terminated or truncated, step() must not be called again.
  StepResult step(const Action& action) {
    CRL_CHECK(!done_, "step() after the episode ended");
    StepResult result = do_step(action);
    ++steps_;
    done_ = result.terminated || result.truncated;
    return result;
  }

  int steps() const { return steps_; }
  bool done() const { return done_; }

  // The environment's finite task list, for checking a client's choice before reset() (the server, `crl
  // run`, `crl rollout`, scenario files): nullopt (the default) when every id is a task of its own (the
  // memory chain and generated coding repositories derive the task from the id), so nothing can alias.
  virtual std::optional<TaskList> task_list() const { return std::nullopt; }
  // Whether `id` names a task of task_list() (by its own id, e.g. "syn-default-early_fact-0003" or a shell
  // task folder). Only meaningful when task_list() is set.
  virtual bool has_task(const std::string& /*id*/) const { return true; }

  // The resume body of a symbolic-view compaction, when the environment writes it from the summary (the
  // synthetic suite's memory-slot summaries: keep:<i> is expanded into record i as it was observed). The
  // episode calls it only with a symbolic codec, with the summary body the policy sampled; returning false
  // (the default) keeps the engine's rule: the summary body itself is copied into resume(S). The environment
  // reads the summary only to expand it; it never changes the episode's state.
  virtual bool symbolic_resume_body(std::span<const TokenId> /*summary*/,
                                    std::vector<TokenId>& /*out*/) const {
    return false;
  }

 protected:
  // Hooks for implementations; the public wrappers keep the bookkeeping.
  virtual Start do_reset(const Task& task, Rng& rng) = 0;
  virtual StepResult do_step(const Action& action) = 0;

 private:
  int steps_ = 0;
  bool done_ = false;
};

// Hands `steps` to their environments' batchers: one prefetch() per batcher, its steps in their order,
// batchers in order of first appearance. Steps of environments without a batcher are skipped.
inline void prepare_steps(std::span<const PendingStep> steps) {
  if (steps.empty()) return;
  StepBatcher* const first = steps.front().env->step_batcher();
  if (first != nullptr && std::all_of(steps.begin(), steps.end(), [&](const PendingStep& step) {
        return step.env->step_batcher() == first;
      })) {
    first->prefetch(steps);  // the common case: one endpoint, no copies
    return;
  }
  std::vector<StepBatcher*> batchers;
  for (const PendingStep& step : steps) {
    StepBatcher* batcher = step.env->step_batcher();
    if (batcher != nullptr && std::find(batchers.begin(), batchers.end(), batcher) == batchers.end()) {
      batchers.push_back(batcher);
    }
  }
  std::vector<PendingStep> mine;
  for (StepBatcher* batcher : batchers) {
    mine.clear();
    for (const PendingStep& step : steps) {
      if (step.env->step_batcher() == batcher) mine.push_back(step);
    }
    batcher->prefetch(mine);
  }
}

}  // namespace crl
