// Create requests -> episodes (POST /v1/episodes, and each episode of POST /v1/rollouts): the task, the
// environment's parameters (server configuration first, server-only ones refused), the budget (the
// environment's default for the view, request fields over it, checked against the real first prompt) and
// the client-chosen timeouts (bounded by the server). Every refusal is a typed 400 naming the field.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "engine/error.h"
#include "envs/registry.h"
#include "server/episode_service.h"
#include "wire/api_error.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote

namespace {

// A crl::Error from the engine as a 400 naming the request field (`prefix` + the engine's field).
ApiError bad_input(const Error& e, const std::string& code, const std::string& prefix,
                   const std::string& fallback_field) {
  std::string field = e.field().empty() ? fallback_field : prefix + e.field();
  return ApiError(400, code, e.message().empty() ? e.what() : e.message(), field);
}

void check_task_text(const std::string& value, const char* field) {
  if (value.size() > 256) {
    throw ApiError(
        400, "bad_task",
        std::string(field) + " is " + std::to_string(value.size()) + " bytes long; at most 256 are allowed",
        field);
  }
  for (unsigned char c : value) {
    if (c < 0x21 || c > 0x7e) {
      throw ApiError(400, "bad_task",
                     std::string(field) + " \"" + value + "\" must be printable ASCII without spaces", field);
    }
  }
}

bool is_split(const std::string& s) {
  return s == "train" || s == "dev" || s == "test";
}

// "dev-3" -> {"dev", 3}: the id the server gives a task chosen by split + index, so that a client may send
// it back as a task_id. False for anything else (leading zeros and signs included: "dev-03" is an id).
bool parse_split_index(const std::string& id, std::string& split, uint64_t& index) {
  const size_t dash = id.find('-');
  if (dash == std::string::npos || !is_split(id.substr(0, dash))) return false;
  const std::string digits = id.substr(dash + 1);
  if (digits.empty() || digits.size() > 19 || (digits.size() > 1 && digits[0] == '0') ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  split = id.substr(0, dash);
  index = std::strtoull(digits.c_str(), nullptr, 10);
  return true;
}

struct RequestedTask {
  Task task;
  bool by_id = false;  // a task_id that is not of the "<split>-<index>" form: it must name a task
};

RequestedTask task_from(const proto::CreateEpisodeRequest& request) {
  const bool by_split = !request.split().empty() || request.has_index();
  if (!request.task_id().empty()) {
    if (by_split)
      throw ApiError(400, "bad_task", "give either task_id or split + index, not both", "task_id");
    check_task_text(request.task_id(), "task_id");
    std::string split;
    uint64_t index = 0;
    if (parse_split_index(request.task_id(), split, index))
      return {Task{request.task_id(), index, split}, false};
    return {Task{request.task_id(), 0, ""}, true};
  }
  if (!by_split)
    throw ApiError(400, "bad_task", "the task is missing: give task_id, or split + index", "task_id");
  if (!is_split(request.split())) {
    throw ApiError(400, "bad_task", "split \"" + request.split() + "\" is not one of train, dev, test",
                   "split");
  }
  if (!request.has_index())
    throw ApiError(400, "bad_task", "split " + request.split() + " needs an index", "index");
  return {Task{request.split() + "-" + std::to_string(request.index()), request.index(), request.split()},
          false};
}

// The request's budget fields over `base` (the environment's default for the view).
Budget budget_from(const proto::BudgetSpec& spec, Budget b) {
  if (spec.has_capacity()) b.capacity = spec.capacity();
  if (spec.has_reserve()) b.reserve = spec.reserve();
  if (spec.has_tail_k()) b.tail_k = spec.tail_k();
  if (spec.has_max_compactions()) b.max_compactions = spec.max_compactions();
  if (spec.has_per_turn_cap()) b.per_turn_cap = spec.per_turn_cap();
  if (spec.has_summary_cap()) b.summary_cap = spec.summary_cap();
  return b;
}

const ParamSpec* declared_param(const std::vector<ParamSpec>& declared, const std::string& name) {
  for (const ParamSpec& p : declared) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

// A request's parameter that the server does not let clients set: server-only ones (host paths, host
// processes, isolation), and durations above the server's timeout limit.
void check_client_param(const std::string& env, const ParamSpec& p, const std::string& value,
                        const ServiceOptions& options) {
  const std::string field = "params." + p.name;
  if (p.server_only) {
    throw ApiError(400, "server_only_param",
                   field +
                       " is server configuration only (it chooses host paths or processes, or weakens "
                       "isolation): the server's operator sets it with crl serve --env-param " +
                       env + "." + p.name + "=VALUE",
                   field);
  }
  if (p.unit == ParamUnit::kNone) return;
  errno = 0;
  char* end = nullptr;
  const double number = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || errno == ERANGE) return;  // not a number: make_env names it
  const double seconds = p.unit == ParamUnit::kMilliseconds ? number / 1000.0 : number;
  if (!(seconds <= options.max_client_timeout_s)) {
    throw ApiError(400, "over_limit",
                   field + " = " + value + (p.unit == ParamUnit::kMilliseconds ? " ms" : " s") +
                       " is above the server's limit of " + format_seconds(options.max_client_timeout_s) +
                       " s for client timeouts (crl serve --max-client-timeout)",
                   field);
  }
}

}  // namespace

std::string format_seconds(double seconds) {
  std::string text = std::to_string(seconds);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

void check_env_params(const ServiceOptions& options) {
  for (const auto& [env, values] : options.env_params) {
    const std::string where = "option --env-param " + env;
    const auto& entry = env_registry().entry(env, "option --env-param");  // throws for an unknown env
    Params::resolve(entry.params, values, where);                         // unknown names and mistyped values
  }
}

EpisodeService::Built EpisodeService::build_episode(const proto::CreateEpisodeRequest& request) const {
  if (request.env().empty()) throw ApiError(400, "unknown_env", "the env field is missing", "env");
  if (!env_registry().contains(request.env())) {
    std::string known;
    for (const std::string& n : env_registry().names()) known += (known.empty() ? "" : ", ") + n;
    throw ApiError(400, "unknown_env",
                   "unknown environment \"" + request.env() + "\" (registered: " + known + ")", "env");
  }
  const RequestedTask requested = task_from(request);
  const Task& task = requested.task;
  if (!request.rollout_id().empty()) check_task_text(request.rollout_id(), "rollout_id");
  const std::string view = request.view().empty() ? "text" : request.view();
  if (view != "text" && view != "symbolic") {
    throw ApiError(400, "bad_field", "view \"" + view + "\" is not one of text, symbolic", "view");
  }

  // Parameters: the server's configuration, then the request's (never a server-only one).
  const auto& declared = env_registry().entry(request.env()).params;
  std::map<std::string, std::string> params;
  if (auto it = options_.env_params.find(request.env()); it != options_.env_params.end()) params = it->second;
  for (const auto& [name, value] : request.params()) {
    if (const ParamSpec* p = declared_param(declared, name))
      check_client_param(request.env(), *p, value, options_);
    params[name] = value;
  }
  // A task given as split + index selects the split of an environment that declares a `split` parameter
  // (the synthetic suite); a contradicting params.split is an error rather than a silent choice.
  if (!task.split.empty() && declared_param(declared, "split") != nullptr) {
    const auto given = request.params().find("split");
    if (given != request.params().end() && given->second != task.split) {
      throw ApiError(400, "bad_task",
                     "split \"" + task.split + "\" contradicts params.split \"" + given->second + "\"",
                     "split");
    }
    params["split"] = task.split;
  }
  std::unique_ptr<Env> env;
  try {
    env = make_env(request.env(), params, "environment \"" + request.env() + "\"");
  } catch (const Error& e) {
    throw bad_input(e, "bad_param", "params.", "params");
  }

  // The task must exist: no index past the end of a finite task list, no id that names none of its tasks.
  const char* task_field = request.task_id().empty() ? "index" : "task_id";
  if (const std::optional<TaskList> list = env->task_list(); list && !env->has_task(task.id)) {
    if (requested.by_id) {
      throw ApiError(400, "bad_task",
                     "unknown task id \"" + task.id + "\": " + list->name + " holds " +
                         std::to_string(list->size) + " tasks; give one of their ids, or split + index",
                     "task_id");
    }
    if (!requested.by_id && task.index >= list->size) {
      throw ApiError(400, "bad_task", task_index_message(task.index, *list), task_field);
    }
  }

  EpisodeConfig config;
  config.budget = budget_from(request.budget(), env->spec().default_budget(view));
  try {
    config.budget.validate("budget");
  } catch (const Error& e) {
    // Fields the request left out came from the environment's defaults: say so, or "reserve" puzzles a
    // client that only sent a capacity.
    const Budget& d = env->spec().default_budget(view);
    ApiError error = bad_input(e, "bad_budget", "budget.", "budget");
    throw ApiError(400, "bad_budget",
                   error.body().message() + " (fields the request leaves out are environment \"" +
                       request.env() + "\"'s defaults for the " + view + " view: capacity " +
                       std::to_string(d.capacity) + ", reserve " + std::to_string(d.reserve) +
                       ", per_turn_cap " + std::to_string(d.per_turn_cap) + ", summary_cap " +
                       std::to_string(d.summary_cap) + ")",
                   error.body().field());
  }
  config.seed = request.seed();
  config.group_index = request.group_index();
  config.sample_index = request.sample_index();
  config.rollout_id = request.rollout_id();

  std::shared_ptr<const Codec> codec;
  try {
    codec = view == "text" ? text_codec_ : make_codec(view, env->spec());
    if (view == "text" && !env->spec().has_text) make_codec(view, env->spec());  // throws: no text view
  } catch (const Error& e) {
    throw ApiError(400, "bad_field", e.message(), "view");
  }

  Built built;
  built.episode = std::make_unique<Episode>(std::move(env), codec, config);
  built.task = task;
  built.view = view;
  built.task_field = task_field;
  return built;
}

void EpisodeService::start_episode(Built& built) const {
  try {
    built.episode->start(built.task);
  } catch (const Error& e) {
    throw ApiError(400, "bad_task", e.message(), built.task_field);
  }
  // A budget that cannot reach its first compaction is refused now, not discovered as a truncated episode.
  const BudgetFit fit = built.episode->budget_fit();
  if (!fit.fits) throw ApiError(400, "bad_budget", fit.detail, "budget.capacity");
}

proto::StepResponse EpisodeService::create(const proto::CreateEpisodeRequest& request) {
  Built built = build_episode(request);
  auto session = std::make_shared<Session>();
  session->env = request.env();
  session->view = built.view;
  session->task_id = built.task.id;
  session->created_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (store_) session->create = request;  // --snapshot-dir: the first half of what rebuilds it
  sessions_.reserve();                    // 429 when full
  try {
    start_episode(built);
    session->episode = std::move(built.episode);
  } catch (...) {
    sessions_.unreserve();
    throw;
  }
  std::lock_guard lock(session->mutex);
  sessions_.insert(session);
  proto::StepResponse out = describe(*session, /*full_prompt=*/true, {});
  out.set_prompt_rebuilt(true);
  after_request(*session);
  metrics_.sessions_created->add();
  metrics_.prompt_tokens->add(static_cast<uint64_t>(out.prompt_ids_size()));
  return out;
}

}  // namespace crl::server
