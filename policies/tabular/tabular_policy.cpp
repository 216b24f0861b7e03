#include "policies/tabular/tabular_policy.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "engine/error.h"

namespace crl {

namespace {

TokenId symbol_id(const EnvSpec& spec, const std::string& name) {
  const auto it = std::find(spec.symbols.begin(), spec.symbols.end(), name);
  if (it == spec.symbols.end()) {
    throw Error("policy \"tabular\"", "env",
                "environment " + quote(spec.name) + " has no symbol " + quote(name) +
                    " (the tabular policy needs the memory-chain vocabulary)");
  }
  return static_cast<TokenId>(it - spec.symbols.begin());
}

// log softmax(logits)[i], stable for any logits.
double log_softmax_at(const double* logits, int n, int i) {
  double max_logit = logits[0];
  for (int j = 1; j < n; ++j) max_logit = std::max(max_logit, logits[j]);
  double total = 0.0;
  for (int j = 0; j < n; ++j) total += std::exp(logits[j] - max_logit);
  return logits[i] - max_logit - std::log(total);
}

// Per-episode exploration keys a decision's stream by its memory state instead of the engine's ordinal (the
// turn or compaction index). The high bit keeps these ordinals apart from the engine's small ones.
constexpr uint64_t kPerEpisodeOrdinal = uint64_t{1} << 63;

}  // namespace

TabularPolicy::TabularPolicy(const PolicyTarget& target, TabularConfig config) : config_(config) {
  if (target.env == nullptr || target.codec == nullptr || target.codec->view_name() != "symbolic") {
    throw Error("policy \"tabular\"", "view", "needs the symbolic view (view: \"symbolic\")");
  }
  const EnvSpec& spec = *target.env;
  fact_ = symbol_id(spec, "FACT");
  resume_ = symbol_id(spec, "RESUME");
  query_ = symbol_id(spec, "QUERY");
  continue_ = symbol_id(spec, "CONTINUE");
  empty_ = symbol_id(spec, "EMPTY");
  value0_ = symbol_id(spec, "V0");
  // The values are V0, V1, ... at consecutive ids (the memory chain's layout); count them.
  arity_ = 0;
  while (static_cast<size_t>(value0_ + arity_) < spec.symbols.size() &&
         spec.symbols[value0_ + arity_] == "V" + std::to_string(arity_)) {
    ++arity_;
  }
  if (arity_ < 2) throw Error("policy \"tabular\"", "env", "needs at least two values V0, V1");
  if (!std::isfinite(config_.entropy) || config_.entropy < 0.0) {
    throw Error("policy \"tabular\"", "entropy",
                "value " + std::to_string(config_.entropy) + " is not a finite number >= 0");
  }
  for (Role role : {Role::kExecute, Role::kSummarize}) {
    logits_[role_index(role)].assign(static_cast<size_t>(memory_states() * actions(role)), 0.0);
    values_[role_index(role)].assign(static_cast<size_t>(memory_states()), 0.0);
  }
}

int TabularPolicy::memory_of(std::span<const std::span<const TokenId>> pieces) const {
  // Newest first: the symbol after the last FACT or RESUME. A marker that ends a piece takes its value from
  // the start of the next piece (a span boundary may fall between them).
  const TokenId* after = nullptr;
  for (size_t p = pieces.size(); p-- > 0;) {
    const std::span<const TokenId> piece = pieces[p];
    for (size_t i = piece.size(); i-- > 0;) {
      if (piece[i] == fact_ || piece[i] == resume_) {
        if (after == nullptr) return arity_;
        const int v = *after - value0_;
        return v >= 0 && v < arity_ ? v : arity_;
      }
      after = &piece[i];
    }
  }
  return arity_;  // no memory at all
}

std::vector<double> TabularPolicy::probabilities(Role role, int memory) const {
  const double* row = logits(role, memory);
  std::vector<double> p(static_cast<size_t>(actions(role)));
  for (int a = 0; a < actions(role); ++a) p[a] = std::exp(log_softmax_at(row, actions(role), a));
  return p;
}

TokenId TabularPolicy::action_token(Role role, int action) const {
  if (role == Role::kSummarize && action == arity_) return empty_;
  return value0_ + action;
}

std::string TabularPolicy::memory_name(int memory) const {
  return memory == arity_ ? "EMPTY" : "V" + std::to_string(memory);
}

Decision TabularPolicy::sample(Role role, int memory, const StreamKey& stream) const {
  const double* row = logits(role, memory);
  int action = 0;
  if (greedy_) {
    for (int a = 1; a < actions(role); ++a) action = row[a] > row[action] ? a : action;
  } else {
    StreamKey key = stream;
    if (config_.exploration == TabularExploration::kPerEpisode) key.ordinal = kPerEpisodeOrdinal + memory;
    Rng rng(key);
    action = rng.categorical(row, actions(role));
  }
  Decision decision;
  decision.tokens = {action_token(role, action)};
  decision.logprobs = {static_cast<float>(log_softmax_at(row, actions(role), action))};
  decision.values = {static_cast<float>(value(role, memory))};
  return decision;
}

void TabularPolicy::act(std::span<const Request* const> requests, std::span<Decision> decisions) const {
  std::vector<std::span<const TokenId>> pieces;
  for (size_t r = 0; r < requests.size(); ++r) {
    const Request& request = *requests[r];
    // Before the question every execution turn is the forced `continue`: no table is read, nothing trains.
    if (request.role == Role::kExecute && (request.prompt.size() == 0 || request.prompt.back() != query_)) {
      Decision decision;
      decision.tokens = {continue_};
      decision.forced = true;
      decisions[r] = std::move(decision);
      continue;
    }
    pieces.clear();
    for (const Span& span : request.prompt.spans()) pieces.push_back(request.prompt.tokens(span));
    decisions[r] = sample(request.role, memory_of(pieces), request.stream);
  }
}

TabularCell TabularPolicy::cell(const Segment& segment, size_t position) const {
  const Role role = segment.kind == SegmentKind::kSummary ? Role::kSummarize : Role::kExecute;
  if (position >= segment.response_ids.size()) {
    throw Error("policy \"tabular\"", "position",
                "token " + std::to_string(position) + " is outside the response");
  }
  const std::span<const TokenId> pieces[2] = {segment.prompt_ids,
                                              std::span<const TokenId>(segment.response_ids).first(position)};
  TabularCell c;
  c.role = role;
  c.memory = memory_of(pieces);
  const TokenId token = segment.response_ids[position];
  if (role == Role::kSummarize && token == empty_) {
    c.action = arity_;
  } else if (token >= value0_ && token < value0_ + arity_) {
    c.action = token - value0_;
  } else {
    throw Error("policy \"tabular\"", "token",
                "token " + std::to_string(token) + " at position " + std::to_string(position) +
                    " is not an action of the " + role_name(role) + " table");
  }
  return c;
}

void TabularPolicy::actor_step(const TabularCell& c, double advantage, double lr) {
  if (c.role == Role::kSummarize && config_.frozen_summary) return;
  const std::vector<double> p = probabilities(c.role, c.memory);
  double* row = logits(c.role, c.memory);
  // d log pi(a) / d logit_j = [j == a] - pi_j: ascend the advantage-weighted log-likelihood.
  for (int j = 0; j < actions(c.role); ++j) row[j] += lr * advantage * ((j == c.action ? 1.0 : 0.0) - p[j]);
}

void TabularPolicy::entropy_step(const TabularCell& c, double lr) {
  if (config_.entropy == 0.0 || (c.role == Role::kSummarize && config_.frozen_summary)) return;
  const std::vector<double> p = probabilities(c.role, c.memory);
  double entropy = 0.0;
  for (double q : p) entropy -= q > 0.0 ? q * std::log(q) : 0.0;
  double* row = logits(c.role, c.memory);
  for (int j = 0; j < actions(c.role); ++j) {
    if (p[j] > 0.0) row[j] -= lr * config_.entropy * p[j] * (std::log(p[j]) + entropy);
  }
}

void TabularPolicy::critic_step(const TabularCell& c, double target, double lr) {
  double& v = values_[role_index(c.role)][c.memory];
  v += lr * (target - v);
}

void TabularPolicy::initialize(uint64_t /*seed: the tables start at zero*/) {
  for (Role role : {Role::kExecute, Role::kSummarize}) {
    std::fill(logits_[role_index(role)].begin(), logits_[role_index(role)].end(), 0.0);
    std::fill(values_[role_index(role)].begin(), values_[role_index(role)].end(), 0.0);
  }
}

void TabularPolicy::train(const TrainStep& step) {
  size_t token = 0;
  const bool actor_pass = step.kind == learners::UpdateKind::kActor;
  const bool per_episode = config_.exploration == TabularExploration::kPerEpisode;
  // Per-episode exploration: a trajectory made each (role, memory, action) choice once, however often it
  // visited the state, so its log-likelihood counts that choice once; the actor step uses the mean of the
  // visits' advantages (all equal when lambda = 1). Cells are updated in the order of their first visit.
  std::vector<TabularCell> order;
  std::map<std::tuple<int, int, int>, std::pair<double, int>> visits;
  for (const Trajectory& t : *step.trajectories) {
    order.clear();
    visits.clear();
    for (const Segment& seg : t.segments) {
      for (size_t i = 0; i < seg.response_ids.size(); ++i, ++token) {
        const bool actor = seg.actor_mask[i] != 0, critic = seg.critic_mask[i] != 0;
        if (actor_pass && actor) {
          const TabularCell c = cell(seg, i);
          const double advantage = step.targets->advantages[token];
          if (!per_episode) {
            actor_step(c, advantage, step.actor_lr);
            entropy_step(c, step.actor_lr);
            continue;
          }
          auto [it, fresh] = visits.try_emplace({role_index(c.role), c.memory, c.action}, 0.0, 0);
          if (fresh) order.push_back(c);
          it->second.first += advantage;
          ++it->second.second;
        } else if (!actor_pass && critic) {
          critic_step(cell(seg, i), step.targets->returns[token], step.critic_lr);
        }
      }
    }
    for (const TabularCell& c : order) {
      const auto& [sum, count] = visits.at({role_index(c.role), c.memory, c.action});
      actor_step(c, sum / count, step.actor_lr);
      entropy_step(c, step.actor_lr);
    }
  }
}

std::string TabularPolicy::shape() const {
  const int m = memory_states();
  return "arity " + std::to_string(arity_) + ": execute " + std::to_string(m) + "x" +
         std::to_string(actions(Role::kExecute)) + ", summarize " + std::to_string(m) + "x" +
         std::to_string(actions(Role::kSummarize));
}

void TabularPolicy::do_save(proto::checkpoint::PolicyState& out) const {
  auto* t = out.mutable_tabular();
  t->set_arity(arity_);
  t->mutable_execute_logits()->Add(logits_[0].begin(), logits_[0].end());
  t->mutable_summarize_logits()->Add(logits_[1].begin(), logits_[1].end());
  t->mutable_execute_values()->Add(values_[0].begin(), values_[0].end());
  t->mutable_summarize_values()->Add(values_[1].begin(), values_[1].end());
}

void TabularPolicy::do_load(const proto::checkpoint::PolicyState& state, const std::string& where) {
  const auto& t = state.tabular();
  auto check = [&](const auto& field, size_t expected, const char* name) {
    if (static_cast<size_t>(field.size()) != expected) {
      throw Error(where, std::string("policy.tabular.") + name,
                  std::to_string(field.size()) + " entries, expected " + std::to_string(expected));
    }
  };
  if (!state.has_tabular() || t.arity() != arity_) {
    throw Error(where, "policy.tabular", "no tabular state of arity " + std::to_string(arity_));
  }
  check(t.execute_logits(), logits_[0].size(), "execute_logits");
  check(t.summarize_logits(), logits_[1].size(), "summarize_logits");
  check(t.execute_values(), values_[0].size(), "execute_values");
  check(t.summarize_values(), values_[1].size(), "summarize_values");
  logits_[0].assign(t.execute_logits().begin(), t.execute_logits().end());
  logits_[1].assign(t.summarize_logits().begin(), t.summarize_logits().end());
  values_[0].assign(t.execute_values().begin(), t.execute_values().end());
  values_[1].assign(t.summarize_values().begin(), t.summarize_values().end());
}

namespace {
const PolicyRegistrar kTabularPolicyRegistrar(
    {"tabular",
     "tabular softmax actor-critic keyed by the memory symbol (memory chain, symbolic view)",
     {{"frozen_summary", ParamType::kBool, "false", "keep the summary policy uniform (the control arm)"},
      {"exploration", ParamType::kString, "per_visit",
       "per_visit: a fresh draw at every decision; per_episode: one draw per (episode, role, memory state), "
       "each such choice trained once per episode (long chains, see policies/tabular/README.md)"},
      {"entropy", ParamType::kDouble, "0", "entropy bonus coefficient (>= 0) of every actor update"}},
     [](const Params& params, const PolicyTarget& target) -> std::unique_ptr<Policy> {
       TabularConfig config;
       config.frozen_summary = params.get_bool("frozen_summary");
       const std::string& exploration = params.get_string("exploration");
       if (exploration == "per_episode") {
         config.exploration = TabularExploration::kPerEpisode;
       } else if (exploration != "per_visit") {
         throw Error("policy \"tabular\"", "exploration",
                     "value " + quote(exploration) + " is not one of per_visit, per_episode");
       }
       config.entropy = params.get_double("entropy");
       return std::make_unique<TabularPolicy>(target, config);
     }});
}  // namespace

}  // namespace crl
