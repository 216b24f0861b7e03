#include "scenarios/scenario.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "engine/error.h"
#include "engine/file_io.h"
#include "envs/registry.h"
#include "learners/options.h"
#include "policies/policy.h"
#include "policies/trainable.h"
#include "scenarios/checkpoint.h"
#include "scenarios/runner.h"
#include "scenarios/text_location.h"

namespace crl::scenarios {

std::shared_ptr<const Codec> setup_codec(const proto::scenario::Setup& s, const EnvSpec& env) {
  if (s.view() != "text") {
    if (s.reasoning())
      throw Error("", "reasoning", "needs view \"text\" (the view is " + quote(s.view()) + ")");
    return make_codec(s.view(), env);
  }
  if (!env.has_text) return make_codec(s.view(), env);  // throws: no text view
  std::shared_ptr<const Tokenizer> tokenizer;
  try {
    tokenizer = make_tokenizer(s.tokenizer());
  } catch (const std::exception& e) {
    throw Error("", "tokenizer", quote(s.tokenizer()) + ": " + e.what());
  }
  TextPrompts prompts;
  if (s.reasoning()) prompts.reasoning = think_reasoning();
  return make_text_codec(std::move(tokenizer), prompts);
}

Budget budget_of(const proto::scenario::Setup& s) {
  Budget b;
  b.capacity = s.budget().capacity();
  b.reserve = s.budget().reserve();
  b.tail_k = s.budget().tail_k();
  b.per_turn_cap = s.budget().per_turn_cap();
  b.summary_cap = s.budget().summary_cap();
  b.max_compactions = s.budget().max_compactions();
  return b;
}

namespace pb = google::protobuf;
using proto::scenario::Scenario;
using proto::scenario::Setup;

namespace {

// Locates fields of the parsed file: "file:line:column" of a field written in it, else "file".
class Locator {
 public:
  Locator(std::string path, const Scenario& file, const pb::TextFormat::ParseInfoTree& tree)
      : text_(std::move(path), Scenario::descriptor(), tree), file_(file) {}

  std::string where(const FieldPath& path) const { return text_.where(path); }

  // Whether the field at `path` (singular messages, then a last field) is written in `message`.
  static bool written(const pb::Message& message, const std::vector<std::string>& path) {
    const pb::Message* m = &message;
    for (size_t i = 0; i < path.size(); ++i) {
      const pb::FieldDescriptor* field = m->GetDescriptor()->FindFieldByName(path[i]);
      CRL_CHECK(field != nullptr, "no field " << path[i]);
      const pb::Reflection* reflection = m->GetReflection();
      if (field->is_repeated()) return reflection->FieldSize(*m, field) > 0;
      if (!reflection->HasField(*m, field)) return false;
      if (i + 1 < path.size()) m = &reflection->GetMessage(*m, field);
    }
    return true;
  }

  // The path of a setup field as the file wrote it: in the arm when the arm sets it, else in the base.
  FieldPath setup_field(int arm, const std::vector<std::string>& inside) const {
    FieldPath path;
    if (arm >= 0 && file_.arm(arm).has_set() && written(file_.arm(arm).set(), inside)) {
      path = {{"arm", arm}, {"set", -1}};
    } else {
      path = {{"base", -1}};
    }
    for (const std::string& f : inside) path.push_back({f, -1});
    return path;
  }

  [[noreturn]] void fail(int arm, const std::vector<std::string>& inside, const std::string& message) const {
    const FieldPath path = setup_field(arm, inside);
    text_.fail(path, message);
  }
  [[noreturn]] void fail(const FieldPath& path, const std::string& message) const {
    text_.fail(path, message);
  }

 private:
  TextLocator text_;
  const Scenario& file_;
};

template <typename Map>
std::map<std::string, std::string> sorted(const Map& map) {
  return std::map<std::string, std::string>(map.begin(), map.end());
}

// The pretraining stage (proto PretrainConfig): its environment and policy parameters build, the policy is
// trainable, and the pretrained state fits the arm's policy (same type and shape).
void check_pretrain(const Setup& s, int arm, const Locator& at, const EnvSpec& env_spec,
                    const std::shared_ptr<const Codec>& codec) {
  const auto& p = s.pretrain();
  if (p.episodes() < 0) at.fail(arm, {"pretrain", "episodes"}, "must be >= 0");
  if (p.episodes() == 0) return;
  std::map<std::string, std::string> env = sorted(s.env().params());
  for (const auto& [k, v] : p.env_params()) env[k] = v;
  std::unique_ptr<Env> pre_env;
  try {
    pre_env = make_env(s.env().name(), env, "environment " + quote(s.env().name()));
  } catch (const Error& e) {
    at.fail(arm, {"pretrain", "env_params"},
            "environment " + quote(s.env().name()) + ": parameter " + quote(e.field()) + ": " + e.message());
  }
  std::map<std::string, std::string> params = sorted(s.policy().params());
  for (const auto& [k, v] : p.policy_params()) params[k] = v;
  std::unique_ptr<Policy> pre, own;
  try {
    pre = make_policy(s.policy().name(), params, PolicyTarget{&pre_env->spec(), codec},
                      "policy " + quote(s.policy().name()));
  } catch (const Error& e) {
    at.fail(arm, {"pretrain", "policy_params"},
            "policy " + quote(s.policy().name()) + ": parameter " + quote(e.field()) + ": " + e.message());
  }
  own = make_policy(s.policy().name(), sorted(s.policy().params()), PolicyTarget{&env_spec, codec},
                    "policy " + quote(s.policy().name()));
  const auto* a = dynamic_cast<const Trainable*>(pre.get());
  const auto* b = dynamic_cast<const Trainable*>(own.get());
  if (a == nullptr || b == nullptr) {
    at.fail(arm, {"pretrain", "episodes"},
            "policy " + quote(s.policy().name()) + " does not learn, so it cannot be pretrained");
  }
  if (a->shape() != b->shape()) {
    at.fail(arm, {"pretrain", "policy_params"},
            "the pretrained policy's shape " + quote(a->shape()) + " differs from the arm's " +
                quote(b->shape()) + " (only parameters that keep the shape may differ)");
  }
}

// The initial state (Setup.init_checkpoint): a checkpoint file whose policy state loads into the arm's
// policy (trainable, same type and shape), and the only base of the arm (no pretrain, no warm start).
void check_init_checkpoint(const Setup& s, int arm, const Locator& at, const EnvSpec& env_spec,
                           const std::shared_ptr<const Codec>& codec) {
  if (!s.has_init_checkpoint()) {
    if (s.fresh_optimizer()) {
      at.fail(arm, {"fresh_optimizer"}, "needs init_checkpoint (the base whose optimizer state it drops)");
    }
    return;
  }
  if (s.init_checkpoint().empty()) at.fail(arm, {"init_checkpoint"}, "is empty (a checkpoint file's path)");
  if (s.pretrain().episodes() > 0 || s.warm_start().episodes() > 0) {
    at.fail(arm, {"init_checkpoint"},
            "is a base of its own: it cannot be combined with pretrain or warm_start episodes");
  }
  std::unique_ptr<Policy> policy;
  try {
    policy = make_policy(s.policy().name(), sorted(s.policy().params()), PolicyTarget{&env_spec, codec},
                         "policy " + quote(s.policy().name()));
  } catch (const Error&) {
    return;  // the policy's own check names the parameter
  }
  auto* trainable = dynamic_cast<Trainable*>(policy.get());
  if (trainable == nullptr) {
    at.fail(arm, {"init_checkpoint"},
            "policy " + quote(s.policy().name()) + " does not learn, so it has no state to start from");
  }
  try {
    trainable->load(read_checkpoint(s.init_checkpoint()).policy(), s.init_checkpoint());
  } catch (const Error& e) {
    at.fail(arm, {"init_checkpoint"}, quote(s.init_checkpoint()) + ": " + e.what());
  }
}

// The warm start (proto WarmStartConfig): ranges, an environment with an oracle, and a policy that learns
// from demonstrations (probed with an empty minibatch, which changes nothing).
void check_warm_start(const Setup& s, int arm, const Locator& at, const EnvSpec& env_spec,
                      const std::shared_ptr<const Codec>& codec) {
  const auto& w = s.warm_start();
  if (w.episodes() < 0) at.fail(arm, {"warm_start", "episodes"}, "must be >= 0");
  if (w.episodes() == 0) return;
  if (w.batch_size() < 1) at.fail(arm, {"warm_start", "batch_size"}, "must be >= 1");
  if (w.epochs() < 1) at.fail(arm, {"warm_start", "epochs"}, "must be >= 1");
  if (!(w.lr() > 0.0 && std::isfinite(w.lr()))) at.fail(arm, {"warm_start", "lr"}, "must be > 0");
  if (w.capacity() < 0) at.fail(arm, {"warm_start", "capacity"}, "must be >= 0 (0: the setup's budget)");
  if (w.capacity() > 0) {
    Budget budget = budget_of(s);
    budget.capacity = w.capacity();
    try {
      budget.validate("warm_start");
    } catch (const Error& e) {
      at.fail(arm, {"warm_start", "capacity"}, e.message());
    }
  }
  if (s.env().name() != "synthetic") {
    at.fail(
        arm, {"warm_start", "episodes"},
        "environment " + quote(s.env().name()) + " has no oracle to demonstrate (the synthetic suite has)");
  }
  const std::unique_ptr<Policy> policy =
      make_policy(s.policy().name(), sorted(s.policy().params()), PolicyTarget{&env_spec, codec}, "policy");
  auto* trainable = dynamic_cast<Trainable*>(policy.get());
  if (trainable == nullptr) {
    at.fail(arm, {"warm_start", "episodes"},
            "policy " + quote(s.policy().name()) + " does not learn, so it cannot be warm-started");
  }
  try {
    trainable->imitate({}, w.lr());
  } catch (const Error& e) {
    at.fail(arm, {"warm_start", "episodes"}, "policy " + quote(s.policy().name()) + ": " + e.message());
  }
}

// Checks one arm's merged setup by building what the runner will build: the environment, the codec, the
// policy, and the budget; then the learner and training ranges.
void check_setup(const Setup& s, int arm, const Locator& at) {
  // Environment and its parameters.
  std::unique_ptr<Env> env;
  try {
    env = make_env(s.env().name(), sorted(s.env().params()), "environment " + quote(s.env().name()));
  } catch (const Error& e) {
    if (!env_registry().contains(s.env().name())) at.fail(arm, {"env", "name"}, e.message());
    at.fail(arm, {"env", "params"},
            "environment " + quote(s.env().name()) + ": parameter " + quote(e.field()) + ": " + e.message());
  }
  // Evaluation-only environment parameters, merged over the setup's.
  if (!s.training().eval_env_params().empty()) {
    std::map<std::string, std::string> merged = sorted(s.env().params());
    for (const auto& [k, v] : s.training().eval_env_params()) merged[k] = v;
    try {
      make_env(s.env().name(), merged, "environment " + quote(s.env().name()));
    } catch (const Error& e) {
      at.fail(
          arm, {"training", "eval_env_params"},
          "environment " + quote(s.env().name()) + ": parameter " + quote(e.field()) + ": " + e.message());
    }
  }
  // View.
  std::shared_ptr<const Codec> codec;
  try {
    codec = setup_codec(s, env->spec());
  } catch (const Error& e) {
    at.fail(arm, {e.field() == "tokenizer" ? "tokenizer" : "view"}, e.message());
  }
  // Policy and its parameters.
  if (!policy_registry().contains(s.policy().name())) {
    try {
      policy_registry().entry(s.policy().name());
    } catch (const Error& e) {
      at.fail(arm, {"policy", "name"}, e.message());
    }
  }
  const Budget episode_budget = budget_of(s);  // a policy may check its sizes against it (lm)
  try {
    make_policy(s.policy().name(), sorted(s.policy().params()),
                PolicyTarget{&env->spec(), codec, sorted(s.env().params()), &episode_budget},
                "policy " + quote(s.policy().name()));
  } catch (const Error& e) {
    bool is_param = false;
    for (const ParamSpec& p : policy_registry().entry(s.policy().name()).params)
      is_param |= p.name == e.field();
    for (const auto& [key, value] : s.policy().params()) is_param |= key == e.field();
    if (is_param) {
      at.fail(arm, {"policy", "params"},
              "policy " + quote(s.policy().name()) + ": parameter " + quote(e.field()) + ": " + e.message());
    }
    at.fail(arm, {"policy", "name"}, e.what());
  }
  // Budget (spec 1.1 guards).
  const Budget budget = budget_of(s);
  try {
    budget.validate("budget");
  } catch (const Error& e) {
    at.fail(arm, {"budget", e.field()}, e.message());
  }
  // The summary request at the trigger holds more than C - T_comp tokens of history plus the instruction
  // q_sum; when that cannot fit C - summary_cap, EVERY summary request cuts observations down to their head
  // and tail (Context::summary_prompt), so the summarizer never sees a whole record: in the text view the
  // middle holds the values to keep. synthetic_tinylm ran that way unnoticed (T_comp 256, summary cap 96, a
  // 164-token instruction), so a run of it is refused with the numbers.
  const int64_t instruction = static_cast<int64_t>(codec->context_template().summary_instruction.size());
  if (budget.reserve < budget.summary_cap + instruction + 1) {
    at.fail(arm, {"budget", "reserve"},
            "value " + std::to_string(budget.reserve) + " is below summary_cap " +
                std::to_string(budget.summary_cap) + " + the summary instruction's " +
                std::to_string(instruction) +
                " tokens + 1 = " + std::to_string(budget.summary_cap + instruction + 1) +
                ": every summary request would cut the observations in its window (give reserve >= " +
                std::to_string(budget.summary_cap + instruction + 1) + ", or a smaller summary_cap)");
  }
  // Learner.
  const auto& l = s.learner();
  auto in_unit = [&](double v, const char* field) {
    if (!(v >= 0.0 && v <= 1.0)) at.fail(arm, {"learner", field}, "value " + quote(v) + " is outside [0, 1]");
  };
  in_unit(l.gamma(), "gamma");
  in_unit(l.lambda(), "lambda");
  try {
    learners::validate_options(learner_options(l), "learner");
  } catch (const Error& e) {
    at.fail(arm, {"learner", e.field()}, e.message());
  }
  if (l.warmup_batches() < 0) at.fail(arm, {"learner", "warmup_batches"}, "must be >= 0");
  if (l.critic_per_actor() < 0) at.fail(arm, {"learner", "critic_per_actor"}, "must be >= 0");
  if (!(l.actor_lr() >= 0.0 && std::isfinite(l.actor_lr()))) {
    at.fail(arm, {"learner", "actor_lr"}, "must be >= 0");
  }
  if (!(l.critic_lr() >= 0.0 && std::isfinite(l.critic_lr()))) {
    at.fail(arm, {"learner", "critic_lr"}, "must be >= 0");
  }
  if (!std::isfinite(l.gate_threshold()))
    at.fail(arm, {"learner", "gate_threshold"}, "must be a finite number");
  // Training.
  const auto& t = s.training();
  if (t.episodes() < 0) at.fail(arm, {"training", "episodes"}, "must be >= 0");
  if (t.batch_size() < 1) at.fail(arm, {"training", "batch_size"}, "must be >= 1");
  if (t.eval_episodes() < 1) at.fail(arm, {"training", "eval_episodes"}, "must be >= 1");
  if (t.eval_interval() < 1) at.fail(arm, {"training", "eval_interval"}, "must be >= 1");
  if (t.curve_eval_episodes() < 0) at.fail(arm, {"training", "curve_eval_episodes"}, "must be >= 0");
  if (t.checkpoint_every() < 0) at.fail(arm, {"training", "checkpoint_every"}, "must be >= 0");
  check_pretrain(s, arm, at, env->spec(), codec);
  check_warm_start(s, arm, at, env->spec(), codec);
  check_init_checkpoint(s, arm, at, env->spec(), codec);
}

// The arms of a file as '"a", "b"', for messages.
std::string arm_list(const ScenarioSpec& spec) {
  std::string arms;
  for (const ArmSpec& a : spec.arms) arms += (arms.empty() ? "" : ", ") + quote(a.name);
  return arms;
}

// The ablation table names arms of the file: the reference, and ablations other than it, each once.
void check_table(const Scenario& file, ScenarioSpec& spec, const Locator& at) {
  spec.has_table = true;
  spec.table = file.table();
  auto known = [&](const std::string& name) {
    for (const ArmSpec& a : spec.arms) {
      if (a.name == name) return true;
    }
    return false;
  };
  const std::string arms = arm_list(spec);
  const auto& t = file.table();
  if (t.reference_arm().empty()) at.fail({{"table", -1}}, "an ablation table needs a reference_arm");
  if (!known(t.reference_arm())) {
    at.fail({{"table", -1}, {"reference_arm", -1}},
            "arm " + quote(t.reference_arm()) + " is not in the file (arms: " + arms + ")");
  }
  std::set<std::string> seen;
  for (int i = 0; i < t.ablation_arms_size(); ++i) {
    const std::string& name = t.ablation_arms(i);
    const FieldPath where = {{"table", -1}, {"ablation_arms", i}};
    if (!known(name)) at.fail(where, "arm " + quote(name) + " is not in the file (arms: " + arms + ")");
    if (name == t.reference_arm()) at.fail(where, "the reference arm cannot be its own ablation");
    if (!seen.insert(name).second) at.fail(where, "arm " + quote(name) + " appears twice");
  }
}

}  // namespace

std::map<std::string, std::string> env_params(const Setup& setup) {
  return sorted(setup.env().params());
}
std::map<std::string, std::string> policy_params(const Setup& setup) {
  return sorted(setup.policy().params());
}

ScenarioSpec parse_scenario(const std::string& text, const std::string& path) {
  Scenario file;
  pb::TextFormat::ParseInfoTree tree;
  parse_text_file(text, path, "scenario file", file, tree);
  const Locator at(path, file, tree);

  ScenarioSpec spec;
  spec.path = path;
  spec.name = file.name();
  spec.description = file.description();
  spec.notes = file.notes();
  spec.gates = file.gates();
  if (spec.name.empty()) at.fail({{"name", -1}}, "a scenario needs a name");
  if (file.seeds_size() == 0) at.fail({{"seeds", -1}}, "a scenario needs at least one seed");
  std::set<uint64_t> seen_seeds;
  for (int i = 0; i < file.seeds_size(); ++i) {
    if (!seen_seeds.insert(file.seeds(i)).second) {
      at.fail({{"seeds", i}}, "seed " + std::to_string(file.seeds(i)) + " appears twice");
    }
    spec.seeds.push_back(file.seeds(i));
  }

  if (file.arm_size() == 0) {
    // No arms: the base setup is the one arm.
    ArmSpec arm;
    arm.name = "default";
    arm.setup = file.base();
    check_setup(arm.setup, -1, at);
    spec.arms.push_back(std::move(arm));
  }
  std::set<std::string> names;
  for (int i = 0; i < file.arm_size(); ++i) {
    const auto& a = file.arm(i);
    if (a.name().empty()) at.fail({{"arm", i}}, "an arm needs a name");
    if (!names.insert(a.name()).second) {
      at.fail({{"arm", i}, {"name", -1}}, "arm name " + quote(a.name()) + " appears twice");
    }
    ArmSpec arm;
    arm.name = a.name();
    arm.description = a.description();
    arm.index = i;
    arm.setup = file.base();
    arm.setup.MergeFrom(a.set());
    check_setup(arm.setup, i, at);
    spec.arms.push_back(std::move(arm));
  }
  if (file.has_table()) check_table(file, spec, at);
  return spec;
}

ScenarioSpec load_scenario(const std::string& path) {
  return parse_scenario(read_file(path), path);
}

ScenarioSpec select_arms(const ScenarioSpec& spec, const std::vector<std::string>& names,
                         const std::string& option) {
  if (names.empty()) throw Error(option, "", "names no arm (give arm names: " + arm_list(spec) + ")");
  std::set<std::string> wanted;
  for (const std::string& name : names) {
    const bool known =
        std::any_of(spec.arms.begin(), spec.arms.end(), [&](const ArmSpec& arm) { return arm.name == name; });
    if (!known) {
      throw Error(option, "",
                  "arm " + quote(name) + " is not in " + spec.path + " (arms: " + arm_list(spec) + ")");
    }
    if (!wanted.insert(name).second) throw Error(option, "", "names arm " + quote(name) + " twice");
  }
  ScenarioSpec out = spec;
  out.arms.clear();
  for (const ArmSpec& arm : spec.arms) {
    if (wanted.count(arm.name)) out.arms.push_back(arm);
  }
  if (out.has_table) {
    proto::scenario::TableConfig& table = out.table;
    const bool listed = table.ablation_arms_size() > 0;
    google::protobuf::RepeatedPtrField<std::string> kept;
    for (const std::string& name : table.ablation_arms()) {
      if (wanted.count(name)) *kept.Add() = name;
    }
    table.mutable_ablation_arms()->Swap(&kept);
    if (!wanted.count(table.reference_arm()) || (listed && table.ablation_arms_size() == 0)) {
      out.has_table = false;
    }
  }
  return out;
}

}  // namespace crl::scenarios
