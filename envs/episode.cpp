#include "envs/episode.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/sha256.h"

namespace crl {

uint64_t task_stream_id(const std::string& task_id) {
  return sha256_u64("task|" + task_id);
}

Episode::Episode(std::unique_ptr<Env> env, std::shared_ptr<const Codec> codec, EpisodeConfig config)
    : env_(std::move(env)),
      codec_(std::move(codec)),
      config_(std::move(config)),
      context_(config_.budget, codec_->context_template()) {
  config_.budget.validate("budget");
}

StreamKey Episode::stream(Role role, uint64_t ordinal) const {
  return StreamKey{config_.seed, task_key_, static_cast<uint32_t>(config_.sample_index),
                   role == Role::kExecute ? StreamRole::kExecute : StreamRole::kSummarize, ordinal};
}

StreamKey Episode::env_stream() const {
  return StreamKey{config_.seed, task_key_, static_cast<uint32_t>(config_.sample_index),
                   StreamRole::kEnvironment, 0};
}

void Episode::start(const Task& task) {
  task_ = task;
  task_key_ = task_stream_id(task.id);
  if (config_.rollout_id.empty()) {
    config_.rollout_id = env_->spec().name + "/" + task.id + "/" + std::to_string(config_.seed) + "/" +
                         std::to_string(config_.sample_index);
  }
  turn_ = 0;
  actions_in_window_ = 0;
  reward_ = 0.0;
  done_ = false;
  finished_ = false;
  status_ = EpisodeStatus::kCompleted;
  reason_.clear();
  running_hash_ = StateHasher();
  running_hash_.add_text(config_.rollout_id);
  running_hash_.add(config_.seed);

  Rng rng(env_stream());
  const Env::Start first = env_->reset(task, rng);
  const std::vector<TokenId> system = codec_->encode_system(first.system);
  const std::vector<TokenId> user = codec_->encode_user(first.user);
  running_hash_.add_tokens(system);
  running_hash_.add_tokens(user);
  first_system_tokens_ = static_cast<int64_t>(system.size());
  first_user_tokens_ = static_cast<int64_t>(user.size());
  if (first.opens_turn) running_hash_.add(1);
  if (!context_.start(system, user, first.opens_turn)) {
    recorder_ = Recorder();
    end(EpisodeStatus::kFailed,
        "the first prompt (" + std::to_string(context_.tokens()) +
            " tokens) does not fit the capacity C = " + std::to_string(config_.budget.capacity));
    return;
  }
  recorder_ = Recorder();
  recorder_.begin_execution(context_.execution_prompt(), 0);
  prepare_next();
}

void Episode::end(EpisodeStatus status, std::string reason) {
  done_ = true;
  status_ = status;
  reason_ = std::move(reason);
  running_hash_.add(static_cast<uint64_t>(status));
}

void Episode::prepare_next() {
  if (context_.needs_compaction()) {
    if (context_.compactions_exhausted()) {
      end(EpisodeStatus::kTruncated, "compaction budget exhausted (" +
                                         std::to_string(context_.compactions()) + " compactions) with " +
                                         std::to_string(context_.tokens()) + " tokens in context");
      return;
    }
    PromptView prompt;
    if (!context_.summary_prompt(prompt)) {
      end(EpisodeStatus::kTruncated,
          "the summary request does not fit even with every observation truncated");
      return;
    }
    const int64_t room = context_.summary_max_new_tokens(prompt);
    if (room <= 0) {
      end(EpisodeStatus::kTruncated, "no room left for a summary");
      return;
    }
    request_ = Request{Role::kSummarize,
                       std::move(prompt),
                       room,
                       stream(Role::kSummarize, context_.compactions()),
                       turn_,
                       context_.compactions()};
    return;
  }
  const int64_t room = context_.max_new_tokens();
  if (room <= 0) {
    end(EpisodeStatus::kTruncated, "the context is full (" + std::to_string(context_.tokens()) + " tokens)");
    return;
  }
  // Filled in place: the prompt's span list keeps its capacity from turn to turn.
  request_.role = Role::kExecute;
  context_.execution_prompt(request_.prompt);
  request_.max_new_tokens = room;
  request_.stream = stream(Role::kExecute, static_cast<uint64_t>(turn_));
  request_.turn = turn_;
  request_.compactions = context_.compactions();
}

void Episode::submit(const Decision& decision) {
  CRL_CHECK(!done_, "submit() after the episode ended");
  // Built only for an error: submit() is on the hot path.
  const auto where = [&] {
    return "episode " + quote(config_.rollout_id) + " turn " + std::to_string(turn_);
  };
  if (static_cast<int64_t>(decision.tokens.size()) > request_.max_new_tokens) {
    throw Error(where(), "tokens",
                std::to_string(decision.tokens.size()) + " tokens but at most " +
                    std::to_string(request_.max_new_tokens) + " were allowed (max_new_tokens)");
  }
  if (!decision.logprobs.empty() && decision.logprobs.size() != decision.tokens.size()) {
    throw Error(where(), "logprobs",
                std::to_string(decision.logprobs.size()) + " log-probs for " +
                    std::to_string(decision.tokens.size()) + " tokens");
  }
  if (!decision.values.empty() && decision.values.size() != decision.tokens.size()) {
    throw Error(where(), "values",
                std::to_string(decision.values.size()) + " values for " +
                    std::to_string(decision.tokens.size()) + " tokens");
  }
  if (decision.forced && request_.role == Role::kSummarize) {
    throw Error(where(), "forced", "a summary is always sampled, never forced");
  }
  running_hash_.add(static_cast<uint64_t>(request_.role) + 1);
  running_hash_.add_tokens(decision.tokens);
  if (!decision.weight_version.empty() && std::find(weight_versions_.begin(), weight_versions_.end(),
                                                    decision.weight_version) == weight_versions_.end()) {
    weight_versions_.push_back(decision.weight_version);
  }
  if (decision.failed) {
    end(EpisodeStatus::kFailed, decision.error.empty() ? "the policy call failed" : decision.error);
    return;
  }

  if (request_.role == Role::kSummarize) {
    const auto body = codec_->summary_body(decision.tokens);
    recorder_.add_summary(request_.prompt, decision.tokens, decision.logprobs, decision.values,
                          decision.finish_reason, context_.compactions(), codec_->decode(body));
    // A symbolic environment may write the resume body itself from the summary (Env::symbolic_resume_body).
    std::vector<TokenId> written;
    const bool expanded = codec_->view_name() == "symbolic" && env_->symbolic_resume_body(body, written);
    const RebuildResult rebuilt = context_.rebuild(expanded ? std::span<const TokenId>(written) : body);
    if (rebuilt.status != RebuildStatus::kRebuilt) {
      end(EpisodeStatus::kTruncated, "the rebuilt context does not fit below C - T_comp even with k = 0");
      return;
    }
    actions_in_window_ = 0;
    recorder_.begin_execution(context_.execution_prompt(), context_.compactions());
    prepare_next();
    return;
  }

  // An execution turn. From the second action of a window on, the turn header is part of the response.
  if (actions_in_window_ > 0) recorder_.append(context_.next_turn_header(), Provenance::kPrompt);
  const Provenance provenance = decision.forced ? Provenance::kForced : Provenance::kSampled;
  context_.append_action(decision.tokens, provenance);
  recorder_.append(decision.tokens, provenance, decision.logprobs, decision.values, decision.finish_reason);
  ++actions_in_window_;
  ++turn_;
  if (decision.finish_reason == "abort") {
    end(EpisodeStatus::kAborted, "the generation was aborted");
    return;
  }

  StepResult result;
  try {
    result = env_->step(codec_->decode_action(decision.tokens));
  } catch (const Error& e) {
    end(EpisodeStatus::kFailed, std::string("the environment failed: ") + e.what());
    return;
  }
  reward_ += result.reward;
  running_hash_.add_double(result.reward);
  const std::vector<TokenId> observation = codec_->encode_observation(result.observation, decision.tokens);
  running_hash_.add_tokens(observation);
  if (result.opens_turn) running_hash_.add(1);  // (unchanged hashes for every other step)
  context_.append_observation(observation, result.opens_turn);
  recorder_.append(observation, Provenance::kEnvironment);
  if (result.request_compaction) context_.request_compaction();
  if (result.terminated) {
    end(EpisodeStatus::kCompleted, "");
    return;
  }
  if (result.truncated) {
    end(EpisodeStatus::kTruncated,
        result.info.empty() ? "the environment truncated the episode" : result.info);
    return;
  }
  prepare_next();
}

std::optional<PendingStep> Episode::pending_step(const Decision& decision) const {
  // Mirrors the paths of submit() that reach env_->step().
  if (done_ || env_->step_batcher() == nullptr || request_.role != Role::kExecute || decision.failed ||
      decision.finish_reason == "abort" ||
      static_cast<int64_t>(decision.tokens.size()) > request_.max_new_tokens ||
      (!decision.logprobs.empty() && decision.logprobs.size() != decision.tokens.size()) ||
      (!decision.values.empty() && decision.values.size() != decision.tokens.size())) {
    return std::nullopt;
  }
  return PendingStep{env_.get(), codec_->decode_action(decision.tokens)};
}

Trajectory Episode::finish() {
  CRL_CHECK(done_ && !finished_, "finish() before the episode ended, or twice");
  finished_ = true;
  Trajectory header;
  header.rollout_id = config_.rollout_id;
  header.env = env_->spec().name;
  header.task_id = task_.id;
  header.seed = config_.seed;
  header.group_index = config_.group_index;
  header.sample_index = config_.sample_index;
  header.reward = reward_;
  header.status = status_;
  header.reason = reason_;
  header.compactions = context_.compactions();
  header.metadata["engine_version"] = CRL_VERSION;
  header.metadata["view"] = codec_->view_name();
  header.metadata["codec_fingerprint"] = codec_->fingerprint();
  header.metadata["state_hash"] = state_hash();
  header.metadata["turns"] = std::to_string(turn_);
  if (!weight_versions_.empty()) {
    std::string joined;
    for (const std::string& v : weight_versions_) joined += (joined.empty() ? "" : ",") + v;
    header.metadata["weight_versions"] = joined;
  }
  return recorder_.finish(std::move(header));
}

BudgetFit Episode::budget_fit() const {
  const ContextTemplate tmpl = codec_->context_template();
  const Budget& b = config_.budget;
  const auto n = [](const std::vector<TokenId>& v) { return static_cast<int64_t>(v.size()); };
  const int64_t header = n(tmpl.turn_header), instruction = n(tmpl.summary_instruction);
  const int64_t cut_observation = n(tmpl.truncation_marker) + 1;  // what summary_prompt() cuts one down to
  // First turn: system + user + header + action (per-turn cap) + observation + instruction <= C -
  // summary_cap.
  const int64_t first_turn = first_system_tokens_ + first_user_tokens_ + header + b.per_turn_cap +
                             cut_observation + instruction + b.summary_cap;
  // Rebuild with k = 0: system + resume(summary) + header < C - T_comp.
  const int64_t rebuild = first_system_tokens_ + n(tmpl.resume_prefix) + b.summary_cap +
                          n(tmpl.resume_suffix) + header + b.reserve + 1;
  BudgetFit fit;
  fit.min_capacity = std::max(first_turn, rebuild);
  fit.fits = b.capacity >= fit.min_capacity;
  if (!fit.fits) {
    fit.detail =
        "capacity " + std::to_string(b.capacity) + " is too small for this episode: the first prompt (" +
        std::to_string(first_system_tokens_ + first_user_tokens_ + header) + " tokens) + a turn of " +
        std::to_string(b.per_turn_cap) + " (per_turn_cap) + the summary instruction (" +
        std::to_string(instruction) + ") + summary_cap " + std::to_string(b.summary_cap) + " needs " +
        std::to_string(first_turn) + "; a rebuild (system " + std::to_string(first_system_tokens_) +
        " + resume frame " + std::to_string(n(tmpl.resume_prefix) + n(tmpl.resume_suffix)) +
        " + summary_cap + reserve " + std::to_string(b.reserve) + ") needs " + std::to_string(rebuild) +
        "; the smallest capacity that works is " + std::to_string(fit.min_capacity);
  }
  return fit;
}

std::string Episode::state_hash() const {
  return running_hash_.hex();
}

}  // namespace crl
