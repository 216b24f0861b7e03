#include "envs/remote/remote_env.h"

// The `remote` environment itself: its parameters, reset (POST /v1/episodes) and step (one POST
// /v1/episodes/{id}/step, or the answer its endpoint prefetched in a batch). The endpoint (the process, the
// connections, the batching) is remote_endpoint.h.
#include <arpa/inet.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "engine/error.h"
#include "envs/registry.h"
#include "envs/remote/remote_endpoint.h"
#include "envs/text_cut.h"
#include "proto/server.pb.h"
#include "wire/utf8.h"

namespace crl {

using remote::RemoteEndpoint;

namespace {
// `text` as one word of /bin/sh (single quotes; a quote inside closes, escapes and reopens them).
std::string shell_word(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

std::string default_remote_command() {
  namespace fs = std::filesystem;
  const fs::path script = "clients/python/crl_remote_env.py";
  std::vector<fs::path> roots;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) roots.push_back(self.parent_path().parent_path());
#ifdef CRL_SOURCE_DIR
  roots.emplace_back(CRL_SOURCE_DIR);
#endif
  for (const fs::path& root : roots) {
    if (fs::is_regular_file(root / script, ec)) {
      return "/usr/bin/python3 " + shell_word((root / script).lexically_normal().string()) + " --port 0";
    }
  }
  return "/usr/bin/python3 " + script.string() + " --port 0";
}

RemoteEnv::RemoteEnv(RemoteConfig config) : config_(std::move(config)) {
  spec_.name = "remote";
  spec_.description = "an environment in another process, over the server's HTTP step protocol";
  spec_.params = param_specs();
  spec_.has_text = true;
  // Prompts come from the process; this fits the reference environment's (clients/python) with room for a
  // few turns per window. A process with longer prompts gets a budget error naming the capacity it needs.
  spec_.text_budget = Budget{4096, 1024, 2, 256, 512, 3};
  spec_.max_observation_bytes = config_.max_observation_bytes;
}

RemoteEnv::~RemoteEnv() {
  close_remote();
}

StepBatcher* RemoteEnv::step_batcher() const {
  return config_.batch ? endpoint_.get() : nullptr;
}

int RemoteEnv::port() const {
  return endpoint_ ? endpoint_->port() : 0;
}

void RemoteEnv::close_remote() {
  if (!open_ || !endpoint_) return;
  open_ = false;
  if (endpoint_->broken()) return;  // the process is dead or silent: do not wait for it again
  try {
    proto::DeleteResponse response;
    endpoint_->call(remote::options_of(config_), "DELETE", "/v1/episodes/" + episode_id_, nullptr, response);
  } catch (const Error&) {
    // Best effort: the process may be gone.
  }
}

std::vector<ParamSpec> RemoteEnv::param_specs() {
  return {
      // Where to connect and what to start on the host are server configuration only
      // (ParamSpec::server_only).
      {"host", ParamType::kString, "127.0.0.1", "IPv4 address of the environment process", true},
      {"port", ParamType::kInt, "0", "its TCP port; 0: start `command` and use the port it prints", true},
      {"command", ParamType::kString, default_remote_command(),
       "started with /bin/sh when port = 0; must print \"PORT <n>\" as its first line", true},
      {"env", ParamType::kString, "",
       "which environment of the process (\"\": the first GET /v1/info lists)"},
      {"wire", ParamType::kString, "json", "json | protobuf: the encoding of requests and answers"},
      {"batch", ParamType::kBool, "true", "send the steps of a lockstep round as one POST /v1/batch/step"},
      {"timeout_ms", ParamType::kInt, "10000", "per request", false, ParamUnit::kMilliseconds},
      {"start_timeout_ms", ParamType::kInt, "30000", "for the \"PORT <n>\" line of a started command", false,
       ParamUnit::kMilliseconds},
      {"max_observation_bytes", ParamType::kInt, "65536", "longer observations keep head and tail"},
  };
}

RemoteConfig RemoteEnv::config_from(const Params& params) {
  const std::string where = "environment \"remote\"";
  RemoteConfig c;
  c.host = params.get_string("host");
  in_addr probe{};
  if (inet_pton(AF_INET, c.host.c_str(), &probe) != 1) {
    throw Error(where, "host", "value " + quote(c.host) + " is not an IPv4 address");
  }
  const int64_t port = params.get_int("port");
  if (port < 0 || port > 65535)
    throw Error(where, "port", "value " + std::to_string(port) + " is not a port");
  c.port = static_cast<int>(port);
  c.command = params.get_string("command");
  if (c.port == 0 && c.command.empty()) throw Error(where, "command", "port = 0 needs a command to start");
  c.env = params.get_string("env");
  c.wire = params.get_string("wire");
  if (c.wire != "json" && c.wire != "protobuf") {
    throw Error(where, "wire", "value " + quote(c.wire) + " is not one of json, protobuf");
  }
  c.batch = params.get_bool("batch");
  c.timeout_ms = static_cast<int>(params.get_int("timeout_ms"));
  if (c.timeout_ms < 1) throw Error(where, "timeout_ms", "must be >= 1");
  c.start_timeout_ms = static_cast<int>(params.get_int("start_timeout_ms"));
  if (c.start_timeout_ms < 1) throw Error(where, "start_timeout_ms", "must be >= 1");
  const int64_t max_obs = params.get_int("max_observation_bytes");
  if (max_obs < 256) throw Error(where, "max_observation_bytes", "must be >= 256");
  c.max_observation_bytes = static_cast<size_t>(max_obs);
  return c;
}

RemoteEnv::Start RemoteEnv::do_reset(const Task& task, Rng& rng) {
  const uint64_t seed = rng.next_u64();
  prefetched_.reset();
  close_remote();  // a reset while an episode is open drops it
  if (!endpoint_)
    endpoint_ = config_.port != 0 ? RemoteEndpoint::attach(config_.host, config_.port)
                                  : RemoteEndpoint::spawn(config_);
  const auto options = remote::options_of(config_);
  const proto::InfoResponse& info = endpoint_->info(options);
  const std::string where = endpoint_->where() + " (reset of task " + quote(task.id) + ")";
  const proto::EnvInfo* chosen = &info.environments(0);
  if (!config_.env.empty()) {
    chosen = nullptr;
    std::string listed;
    for (const proto::EnvInfo& e : info.environments()) {
      if (e.name() == config_.env) chosen = &e;
      listed += (listed.empty() ? "" : ", ") + e.name();
    }
    if (!chosen)
      throw Error(where, "env",
                  "the process serves no environment " + quote(config_.env) + " (it lists " + listed + ")");
  }
  if (!chosen->views().empty() &&
      std::find(chosen->views().begin(), chosen->views().end(), "text") == chosen->views().end()) {
    throw Error(where, "views", "environment " + quote(chosen->name()) + " has no text view");
  }
  if (task.index > std::numeric_limits<uint32_t>::max()) {
    throw Error(where, "index",
                "value " + std::to_string(task.index) + " does not fit the protocol's uint32");
  }
  proto::CreateEpisodeRequest request;
  request.set_env(chosen->name());
  request.set_task_id(wire::valid_utf8(task.id));
  request.set_split(wire::valid_utf8(task.split));
  request.set_index(static_cast<uint32_t>(task.index));
  request.set_seed(seed);
  proto::StepResponse response;
  endpoint_->call(options, "POST", "/v1/episodes", &request, response);
  if (response.episode_id().empty()) throw Error(where, "episode_id", "missing in the answer");
  // From here on the process holds the episode: an error below still deletes it.
  episode_id_ = response.episode_id();
  next_turn_id_ = response.next_turn_id();
  open_ = true;
  if (response.terminated() || response.truncated() ||
      (!response.kind().empty() && response.kind() != "observation")) {
    throw Error(where, "kind", "a reset must answer kind \"observation\" (not terminated, not truncated)");
  }
  Start start;
  start.system.text = cut_middle(response.prompt_text(), config_.max_observation_bytes);
  start.user.text = cut_middle(response.append_text(), config_.max_observation_bytes);
  return start;
}

StepResult RemoteEnv::do_step(const Action& action) {
  const std::string where = (endpoint_ ? endpoint_->where() : std::string("remote environment")) +
                            " episode " + quote(episode_id_) + " step " + std::to_string(steps());
  StepResult result;
  uint32_t next_turn_id = 0;
  if (prefetched_) {
    // Answered by the batch of this round.
    Prefetched p = std::move(*prefetched_);
    prefetched_.reset();
    if (p.action != action.text) {
      open_ = false;
      throw Error(where, "action", "differs from the action announced to the batcher (it was already sent)");
    }
    if (p.error) throw *p.error;
    result = std::move(*p.result);
    next_turn_id = p.next_turn_id;
  } else {
    if (!open_) throw Error(where, "episode_id", "no open remote episode (reset first)");
    proto::StepRequest request;
    request.set_episode_id(episode_id_);
    request.set_turn_id(next_turn_id_);
    request.mutable_action()->set_kind("assistant");
    request.mutable_action()->set_text(wire::valid_utf8(action.text));
    proto::StepResponse response;
    const std::string target = "/v1/episodes/" + episode_id_ + "/step";
    endpoint_->call(remote::options_of(config_), "POST", target, &request, response);
    result = remote::to_result(response, endpoint_->where() + " POST " + target, episode_id_,
                               config_.max_observation_bytes);
    next_turn_id = response.next_turn_id();
  }
  next_turn_id_ = next_turn_id != 0 ? next_turn_id : next_turn_id_ + 1;
  // The process forgets an episode that ended: nothing to delete.
  if (result.terminated || result.truncated) open_ = false;
  return result;
}

namespace {
const EnvRegistrar kRemoteEnvRegistrar({"remote",
                                        "an environment in another process (the server's HTTP step protocol)",
                                        RemoteEnv::param_specs(),
                                        [](const Params& params) -> std::unique_ptr<Env> {
                                          return std::make_unique<RemoteEnv>(RemoteEnv::config_from(params));
                                        }});
}  // namespace

}  // namespace crl
