#include "envs/synthetic/synthetic_env.h"

#include <mutex>

#include "engine/error.h"
#include "envs/registry.h"
#include "envs/synthetic/splits.h"
#include "envs/synthetic/symbolic.h"
#include "envs/synthetic/task_mix.h"
#include "envs/synthetic/verifier.h"

namespace crl::envs::synthetic {

const char* const kSystemPrompt =
    "You read a log of records through a console, one command per turn. Reply with exactly one line:\n"
    "  next             show the next record (after the last record: END and the question)\n"
    "  submit <answer>  submit your final answer; this ends the episode\n"
    "Anything else is an invalid command.";

namespace {

constexpr const char* kInvalidText =
    "ERROR: invalid command (reply with exactly one line: `next` or `submit <answer>`)";
constexpr const char* kSubmittedText = "SUBMITTED";
const std::string kTurnLimitText = "TRUNCATED: turn limit reached";
const std::string kInvalidLimitText = "TRUNCATED: too many invalid commands";

std::vector<ParamSpec> make_params() {
  return {
      {"split", ParamType::kString, "dev", "train | dev | test"},
      {"namespace", ParamType::kString, "default",
       "task namespace: default (240/60/60), phase3 (1440/180/180) or hard (240/60/60, 48 records per task, "
       "its own default budgets)"},
      {"source", ParamType::kString, "generate",
       "generate (the generator, on the fly) | files (the JSONL split files in data_dir)"},
      {"data_dir", ParamType::kString, "",
       "folder of the split files for source=files (default data/synthetic[_<namespace>], from the working "
       "directory); a host path: server configuration only",
       true},
      {"turn_limit", ParamType::kInt, "64", "turns before the episode is truncated (R = 0)"},
      {"invalid_limit", ParamType::kInt, "8", "invalid commands before the episode is truncated (R = 0)"},
      {"types", ParamType::kString, "",
       "comma-separated task types to keep (early_fact, latest_update, ordered_plan; empty: all), e.g. "
       "another task mix to pretrain on (envs/synthetic/task_mix.h)"},
      {"view", ParamType::kString, "both",
       "text | symbolic | both: which observation renderings to fill (both: the codec picks; an action is "
       "read from its symbols when it has any, else from its text)"},
  };
}

View parse_view(const std::string& text) {
  if (text == "text") return View::kText;
  if (text == "symbolic") return View::kSymbolic;
  if (text == "both") return View::kBoth;
  throw Error("environment \"synthetic\"", "view", "value " + quote(text) + " is not text, symbolic or both");
}

}  // namespace

const EnvSpec& synthetic_env_spec() {
  static const EnvSpec kSpec = [] {
    EnvSpec spec;
    spec.name = "synthetic";
    spec.description =
        "synthetic memory suite: read 16 records with `next`, answer an early_fact / latest_update / "
        "ordered_plan question with `submit`; exact verifier";
    spec.params = make_params();
    spec.has_text = true;
    // Text view (byte tokens; a record is 150-190 tokens): 1-2 compactions per episode, and a summary
    // request fits C - summary_cap without cutting observations. The summary cap is the spec's 256.
    spec.text_budget = Budget{3072, 1024, 2, 64, 256, 3};
    spec.symbols = Vocabulary::get().names_for(kRecordsPerTask);
    spec.symbolic_template = symbolic_template();
    return spec;
  }();
  return kSpec;
}

const EnvSpec& synthetic_env_spec(std::string_view name_space) {
  if (name_space != kHardNamespace) return synthetic_env_spec();
  static const EnvSpec kHardSpec = [] {
    EnvSpec spec = synthetic_env_spec();
    spec.description =
        "synthetic memory suite, hard namespace: read 48 records with `next` (many distractors of the "
        "answer's kind and key), answer an early_fact / latest_update / ordered_plan question with `submit`";
    spec.symbols = Vocabulary::get().names_for(kHardRecordsPerTask);
    // The namespace's default budgets (README "Hard namespace"): every episode compacts at least 6 times,
    // and a summary holds at most 4 slots (KEEP_TASK + 3 records), fewer than keeping every record of the
    // answer's kind or key would need. max_compactions leaves room for all of them.
    spec.text_budget = Budget{3072, 1024, 2, 64, 256, kHardMaxCompactions};
    spec.symbolic_budget = hard_symbolic_budget();
    return spec;
  }();
  return kHardSpec;
}

Budget hard_symbolic_budget() {
  return Budget{kHardCapacity, kHardReserve, 2, 4, kHardSummaryCap, kHardMaxCompactions};
}

std::shared_ptr<const TaskSet> shared_task_set(const std::string& source, const std::string& dir,
                                               const std::string& name_space, const std::string& split) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const TaskSet>> cache;
  const std::string key = source + "\n" + dir + "\n" + name_space + "\n" + split;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto set = std::make_shared<TaskSet>();
  if (source == "generate") {
    set->tasks = generate_split(name_space, split);
  } else if (source == "files") {
    set->tasks = load_split(dir.empty() ? default_split_dir(name_space) : dir, split);
  } else {
    throw Error("environment \"synthetic\"", "source",
                "value " + quote(source) + " is not generate or files");
  }
  for (size_t i = 0; i < set->tasks.size(); ++i) {
    const SyntheticTask& t = set->tasks[i];
    set->by_id.emplace(t.task_id, static_cast<int>(i));
    TaskViews views{"END\n" + t.question, symbolic_user(t), {}, symbolic_end(t)};
    for (int r = 0; r < static_cast<int>(t.records.size()); ++r)
      views.records.push_back(symbolic_record(t, r));
    set->views.push_back(std::move(views));
  }
  cache.emplace(key, set);
  return set;
}

namespace {
const EnvRegistrar kSyntheticEnvRegistrar({"synthetic", synthetic_env_spec().description,
                                           synthetic_env_spec().params, [](const Params& params) {
                                             return std::make_unique<SyntheticEnv>(params);
                                           }});
}  // namespace

SyntheticEnv::SyntheticEnv(const Params& params)
    : view_(parse_view(params.get_string("view"))),
      turn_limit_(static_cast<int>(params.get_int("turn_limit"))),
      invalid_limit_(static_cast<int>(params.get_int("invalid_limit"))) {
  const std::string where = "environment \"synthetic\"";
  if (turn_limit_ < 1)
    throw Error(where, "turn_limit", "value " + std::to_string(turn_limit_) + " must be >= 1");
  if (invalid_limit_ < 1) {
    throw Error(where, "invalid_limit", "value " + std::to_string(invalid_limit_) + " must be >= 1");
  }
  const std::string& split = params.get_string("split");
  if (split != "train" && split != "dev" && split != "test") {
    throw Error(where, "split", "value " + quote(split) + " is not train, dev or test");
  }
  const std::string& name_space = params.get_string("namespace");
  namespace_layout(name_space);  // an unknown namespace fails here, naming the known ones
  tasks_ = shared_task_set(params.get_string("source"), params.get_string("data_dir"), name_space, split);
  spec_ = &synthetic_env_spec(name_space);
  tasks_ = restrict_task_types(tasks_, params.get_string("types"));
  split_ = split;
  name_space_ = name_space;
}

void SyntheticEnv::set_observation(Observation& out, const std::string& text,
                                   const std::vector<TokenId>& symbols) const {
  if (view_ != View::kSymbolic) out.text = text;
  if (view_ != View::kText) out.symbols = symbols;
}

std::optional<TaskList> SyntheticEnv::task_list() const {
  return TaskList{"split " + quote(split_) + " (namespace " + name_space_ + ")", tasks_->tasks.size()};
}

bool SyntheticEnv::has_task(const std::string& id) const {
  return tasks_->by_id.count(id) != 0;
}

Env::Start SyntheticEnv::do_reset(const Task& task, Rng& /*rng: tasks are fixed; nothing here is random*/) {
  // A synthetic task id ("syn-...") must name a task of this split: a typo or a task of another split is an
  // error, not silently another task. Any other id is the caller's label (drivers number their episodes
  // "demo-0", "t0", ...; the server "dev-3"), and the task is the index-th of the split: an index past its
  // end is an error, unless the driver asked to cycle through the split (Task::cycle).
  const size_t size = tasks_->tasks.size();
  if (!task.cycle && task.index >= size && task.id.rfind("syn-", 0) != 0) {
    throw Error("environment \"synthetic\"", "task", task_index_message(task.index, *task_list()));
  }
  size_t position = static_cast<size_t>(task.index % size);
  if (task.id.rfind("syn-", 0) == 0) {
    auto it = tasks_->by_id.find(task.id);
    if (it == tasks_->by_id.end()) {
      throw Error("environment \"synthetic\"", "task",
                  "unknown task id " + quote(task.id) + ": " + task_list()->name + " holds " +
                      std::to_string(size) + " tasks (" + tasks_->tasks.front().task_id + " ..)");
    }
    position = static_cast<size_t>(it->second);
  }
  task_ = &tasks_->tasks[position];
  views_ = &tasks_->views[position];
  records_seen_ = 0;
  turns_ = 0;
  invalid_commands_ = 0;
  submitted_ = correct_ = truncated_ = false;

  static const std::string kSystem = kSystemPrompt;
  static const std::vector<TokenId> kSystemSymbols = {Vocabulary::get().system};
  Start start;
  set_observation(start.system, kSystem, kSystemSymbols);
  set_observation(start.user, task_->instruction, views_->user);
  return start;
}

SyntheticEnv::Command SyntheticEnv::parse(const Action& action, std::string& answer) const {
  const Vocabulary& v = Vocabulary::get();
  // A symbolic env reads the symbols; `both` reads them when present, else the text.
  if (view_ == View::kSymbolic || (view_ == View::kBoth && !action.symbols.empty())) {
    const auto& s = action.symbols;
    if (s.size() == 1 && s[0] == v.next) return Command::kNext;
    if (s.size() >= 2 && s[0] == v.submit) {
      answer = symbolic_answer_text(task_->type, std::span<const TokenId>(s).subspan(1));
      return Command::kSubmit;
    }
    return Command::kInvalid;
  }
  const std::string_view line = trim(action.text);
  if (line.find('\n') != std::string_view::npos) return Command::kInvalid;  // more than one line
  if (line == "next") return Command::kNext;
  if (line.size() > 7 && line.starts_with("submit") && (line[6] == ' ' || line[6] == '\t')) {
    answer = std::string(trim(line.substr(7)));
    return answer.empty() ? Command::kInvalid : Command::kSubmit;
  }
  return Command::kInvalid;
}

StepResult SyntheticEnv::do_step(const Action& action) {
  const Vocabulary& v = Vocabulary::get();
  StepResult result;
  ++turns_;
  std::string answer;
  switch (parse(action, answer)) {
    case Command::kNext:
      if (records_seen_ < static_cast<int>(task_->records.size())) {
        set_observation(result.observation, task_->records[records_seen_].text,
                        views_->records[records_seen_]);
        ++records_seen_;
      } else {
        set_observation(result.observation, views_->end_text, views_->end);
      }
      break;
    case Command::kSubmit: {
      submitted_ = true;
      correct_ = verify_answer(*task_, answer);
      result.reward = correct_ ? 1.0 : 0.0;
      result.terminated = true;
      static const std::string kText = kSubmittedText;
      static const std::vector<TokenId> kSymbols = {v.end};
      set_observation(result.observation, kText, kSymbols);
      result.info = correct_ ? "correct" : "wrong answer";
      return result;
    }
    case Command::kInvalid: {
      ++invalid_commands_;
      static const std::string kText = kInvalidText;
      static const std::vector<TokenId> kSymbols = {v.error};
      set_observation(result.observation, kText, kSymbols);
      result.info = "invalid command";
      break;
    }
  }
  const bool invalid_limit = invalid_commands_ >= invalid_limit_;
  if (invalid_limit || turns_ >= turn_limit_) {
    truncated_ = true;
    result.truncated = true;
    result.reward = 0.0;
    const std::string& reason = invalid_limit ? kInvalidLimitText : kTurnLimitText;
    if (view_ != View::kSymbolic) result.observation.text += "\n" + reason;
    if (view_ != View::kText) result.observation.symbols.push_back(v.truncated);
    result.info = invalid_limit ? "invalid-command limit" : "turn limit";
  }
  return result;
}

bool SyntheticEnv::symbolic_resume_body(std::span<const TokenId> summary, std::vector<TokenId>& out) const {
  if (view_ == View::kText || task_ == nullptr) return false;
  out = symbolic_resume(*task_, records_seen_, summary);
  return true;
}

EpisodeMetrics SyntheticEnv::episode_metrics() const {
  EpisodeMetrics m;
  if (task_ == nullptr) return m;
  m.task_id = task_->task_id;
  m.type = task_->type;
  m.submitted = submitted_;
  m.exact_match = correct_;
  m.truncated = truncated_;
  m.turns = turns_;
  m.invalid_commands = invalid_commands_;
  m.records_seen = records_seen_;
  return m;
}

}  // namespace crl::envs::synthetic
