#include "envs/remote/remote_env.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "engine/error.h"
#include "envs/registry.h"
#include "envs/remote/http_connection.h"
#include "proto/server.pb.h"
#include "wire/api_error.h"
#include "wire/utf8.h"
#include "wire/wire_codec.h"

namespace crl {
namespace remote {

namespace {

using Clock = std::chrono::steady_clock;
using wire::WireFormat;

// The protocol version this client speaks (the server's kProtocolVersion, server/episode_service.h).
constexpr const char* kProtocolVersion = "1";
// Idle keep-alive connections kept per endpoint (one per thread that drives episodes is enough).
constexpr size_t kMaxIdleConnections = 64;

std::string cap(std::string text, size_t limit) {
  if (text.size() <= limit) return text;
  const std::string marker = "\n[... " + std::to_string(text.size()) + " bytes, middle cut ...]\n";
  const size_t keep = limit > marker.size() ? limit - marker.size() : 0;
  size_t head = keep / 3;
  size_t tail_from = text.size() - (keep - head);
  // Never cut inside a UTF-8 sequence.
  while (head > 0 && (static_cast<unsigned char>(text[head]) & 0xC0) == 0x80) --head;
  while (tail_from < text.size() && (static_cast<unsigned char>(text[tail_from]) & 0xC0) == 0x80) ++tail_from;
  return text.substr(0, head) + marker + text.substr(tail_from);
}

// Protobuf string fields hold UTF-8 only; actions decoded from byte-level tokens may not be.
std::string utf8(std::string_view text) {
  return wire::is_valid_utf8(text) ? std::string(text) : wire::valid_utf8(text);
}

// Per-request settings, taken from the calling environment's configuration.
struct CallOptions {
  std::chrono::milliseconds timeout{10000};
  WireFormat format = WireFormat::kJson;
  size_t max_response_bytes = 64u << 20;
};

CallOptions options_of(const RemoteConfig& c) {
  return CallOptions{std::chrono::milliseconds(c.timeout_ms),
                     c.wire == "protobuf" ? WireFormat::kProtobuf : WireFormat::kJson, c.max_response_bytes};
}

// An error answer (non-200) as a crl::Error naming the field the process named.
Error answer_error(const std::string& where, int status, const proto::ErrorBody& body) {
  std::string message = "HTTP " + std::to_string(status);
  if (!body.code().empty()) message += " " + body.code();
  if (!body.message().empty()) message += ": " + body.message();
  return Error(where, body.field(), message);
}

// The result of a step from the process's answer (the field list of envs/remote/README.md).
StepResult to_result(const proto::StepResponse& r, const std::string& where, const std::string& episode_id,
                     size_t max_observation_bytes) {
  if (!r.episode_id().empty() && r.episode_id() != episode_id) {
    throw Error(where, "episode_id", "the answer is for episode " + quote(r.episode_id()));
  }
  const bool ended = r.terminated() || r.truncated();
  if (!r.kind().empty() && r.kind() != "observation" && r.kind() != "done") {
    throw Error(where, "kind", "value " + quote(r.kind()) + " is not one of observation, done");
  }
  if (r.kind() == "done" && !ended)
    throw Error(where, "kind", "\"done\" but neither terminated nor truncated");
  if (r.kind() == "observation" && ended) {
    throw Error(where, "kind", "\"observation\" but terminated or truncated is set (expected \"done\")");
  }
  if (!std::isfinite(r.reward())) throw Error(where, "reward", "value is not finite");
  StepResult result;
  result.observation.text = cap(r.append_text(), max_observation_bytes);
  result.reward = r.reward();
  result.terminated = r.terminated();
  result.truncated = r.truncated();
  result.info = r.reason();
  return result;
}

}  // namespace

// One environment process at host:port, shared by every RemoteEnv that uses it: a pool of keep-alive
// connections, the cached /v1/info, the StepBatcher of their steps, and (port = 0) the started process.
class RemoteEndpoint final : public StepBatcher {
 public:
  RemoteEndpoint(std::string host, int port, pid_t child)
      : host_(std::move(host)), port_(port), child_(child) {}

  ~RemoteEndpoint() override {
    idle_.clear();
    if (child_ > 0) {
      // Stop the process we started: SIGTERM, up to 1 s, then SIGKILL (its whole group).
      kill(-child_, SIGTERM);
      int status = 0;
      bool gone = false;
      for (int i = 0; i < 100 && !gone; ++i) {
        gone = waitpid(child_, &status, WNOHANG) == child_;
        if (!gone) usleep(10000);
      }
      if (!gone) {
        kill(-child_, SIGKILL);
        waitpid(child_, &status, 0);
      }
    }
  }

  // The endpoint of a process that is already running (shared by host:port).
  static std::shared_ptr<RemoteEndpoint> attach(const std::string& host, int port) {
    std::lock_guard lock(registry_mutex());
    auto& known = registry();
    const std::string key = host + ":" + std::to_string(port);
    if (auto it = known.find(key); it != known.end()) {
      if (auto alive = it->second.lock()) return alive;
    }
    auto endpoint = std::make_shared<RemoteEndpoint>(host, port, -1);
    remember(key, endpoint);
    return endpoint;
  }

  // Starts `command`, reads "PORT <n>" from its first line, and returns the endpoint that owns the process.
  static std::shared_ptr<RemoteEndpoint> spawn(const RemoteConfig& config) {
    const std::string where = "remote environment command " + quote(config.command);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw Error(where, "command", std::string("pipe: ") + strerror(errno));
    std::vector<std::string> argv_s = {"sh", "-c", "exec " + config.command};
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) throw Error(where, "command", std::string("fork: ") + strerror(errno));
    if (pid == 0) {
      // The environment process must not outlive the engine, even when the engine dies without running its
      // destructors (a crash, an abort): it would keep the engine's stderr open and hold its port.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      setpgid(0, 0);
      dup2(fds[1], 1);
      execv("/bin/sh", argv.data());
      _exit(127);
    }
    setpgid(pid, pid);
    close(fds[1]);
    // From here on the endpoint owns the process: any failure below stops it.
    auto endpoint = std::make_shared<RemoteEndpoint>(config.host, 0, pid);
    std::string line;
    const auto deadline = Clock::now() + std::chrono::milliseconds(config.start_timeout_ms);
    while (line.find('\n') == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fds[0], POLLIN, 0};
      if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char c[256];
      const ssize_t n = read(fds[0], c, sizeof c);
      if (n <= 0) break;
      line.append(c, static_cast<size_t>(n));
    }
    close(fds[0]);
    int port = 0;
    if (std::sscanf(line.c_str(), "PORT %d", &port) != 1 || port <= 0 || port > 65535) {
      throw Error(where, "command",
                  "did not print \"PORT <n>\" first (got " + quote(line.substr(0, 80)) + ")");
    }
    endpoint->port_ = port;
    std::lock_guard lock(registry_mutex());
    remember(config.host + ":" + std::to_string(port), endpoint);
    return endpoint;
  }

  int port() const { return port_; }
  std::string where() const { return "remote environment " + host_ + ":" + std::to_string(port_); }
  // True after a transport failure (until an exchange succeeds again): nothing more is sent on cleanup.
  bool broken() const { return broken_.load(); }

  // Sends `request` (nullptr: no body) and decodes a 200 answer into `response`. Throws crl::Error naming
  // the endpoint, the request and, for an error answer or a malformed one, the field.
  void call(const CallOptions& options, std::string_view method, const std::string& target,
            const google::protobuf::Message* request, google::protobuf::Message& response) {
    const std::string where = this->where() + " " + std::string(method) + " " + target;
    std::string body = request ? wire::encode_message(*request, options.format) : std::string();
    std::unique_ptr<HttpConnection> connection = take(options);
    HttpReply reply;
    try {
      reply = connection->exchange(method, target, std::move(body), wire::content_type(options.format));
    } catch (const Error&) {
      broken_ = true;
      throw;
    }
    broken_ = false;
    if (connection->usable()) give_back(std::move(connection));
    try {
      const WireFormat format = wire::format_from_content_type(reply.content_type);
      if (reply.status != 200) {
        proto::ErrorBody error;
        try {
          wire::decode_message(reply.body, format, error);
        } catch (const wire::ApiError&) {
          throw Error(where, "",
                      "HTTP " + std::to_string(reply.status) + ": " + quote(reply.body.substr(0, 200)));
        }
        throw answer_error(where, reply.status, error);
      }
      wire::decode_message(reply.body, format, response);
    } catch (const wire::ApiError& e) {
      throw Error(where, e.field(), std::string("malformed answer: ") + e.what());
    }
  }

  // GET /v1/info, fetched once and checked: the protocol version, at least one environment.
  const proto::InfoResponse& info(const CallOptions& options) {
    std::lock_guard lock(info_mutex_);
    if (!info_) {
      proto::InfoResponse info;
      call(options, "GET", "/v1/info", nullptr, info);
      const std::string where = this->where() + " GET /v1/info";
      if (info.protocol_version() != kProtocolVersion) {
        throw Error(where, "protocol_version",
                    "value " + quote(info.protocol_version()) + " (this engine speaks " +
                        quote(kProtocolVersion) + ")");
      }
      if (info.environments().empty()) throw Error(where, "environments", "the process lists no environment");
      info_ = std::move(info);
    }
    return *info_;
  }

  // One /v1/batch/step per chunk of at most limits.max_batch steps (all of them when it is 0).
  void prefetch(std::span<const PendingStep> steps) override {
    if (steps.empty()) return;
    const auto* first = dynamic_cast<const RemoteEnv*>(steps.front().env);
    if (first == nullptr) return;  // see send_batch
    const CallOptions options = options_of(first->config_);
    size_t chunk = steps.size();
    try {
      const uint32_t max_batch = info(options).limits().max_batch();
      if (max_batch > 0) chunk = max_batch;
    } catch (const Error&) {
      // The info was fetched at the first reset; a failure now fails the batch below as well.
    }
    for (size_t begin = 0; begin < steps.size(); begin += chunk) {
      send_batch(options, steps.subspan(begin, std::min(chunk, steps.size() - begin)));
    }
  }

 private:
  static std::mutex& registry_mutex() {
    static std::mutex mutex;
    return mutex;
  }
  static std::map<std::string, std::weak_ptr<RemoteEndpoint>>& registry() {
    static std::map<std::string, std::weak_ptr<RemoteEndpoint>> endpoints;
    return endpoints;
  }
  // Under registry_mutex().
  static void remember(const std::string& key, const std::shared_ptr<RemoteEndpoint>& endpoint) {
    auto& known = registry();
    std::erase_if(known, [](const auto& entry) { return entry.second.expired(); });
    known[key] = endpoint;
  }

  std::unique_ptr<HttpConnection> take(const CallOptions& options) {
    {
      std::lock_guard lock(pool_mutex_);
      if (!idle_.empty()) {
        auto connection = std::move(idle_.back());
        idle_.pop_back();
        connection->set_limits(options.timeout, options.max_response_bytes);
        return connection;
      }
    }
    try {
      return std::make_unique<HttpConnection>(host_, port_, options.timeout, where(),
                                              options.max_response_bytes);
    } catch (const Error&) {
      broken_ = true;
      throw;
    }
  }

  void give_back(std::unique_ptr<HttpConnection> connection) {
    std::lock_guard lock(pool_mutex_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(connection));
  }

  void send_batch(const CallOptions& options, std::span<const PendingStep> steps) {
    proto::BatchStepRequest request;
    std::vector<RemoteEnv*> envs;
    for (const PendingStep& step : steps) {
      // Only RemoteEnvs return this batcher; a wrapper that forwarded it is skipped (its steps stay single).
      auto* env = dynamic_cast<RemoteEnv*>(step.env);
      if (env == nullptr || env->endpoint_.get() != this) continue;
      env->prefetched_ = RemoteEnv::Prefetched{step.action.text, std::nullopt, 0, std::nullopt};
      if (!env->open_) {
        env->prefetched_->error = Error(where(), "episode_id", "no open remote episode (reset first)");
        continue;
      }
      proto::StepRequest* item = request.add_steps();
      item->set_episode_id(env->episode_id_);
      item->set_turn_id(env->next_turn_id_);
      item->mutable_action()->set_kind("assistant");
      item->mutable_action()->set_text(utf8(step.action.text));
      envs.push_back(env);
    }
    if (envs.empty()) return;
    proto::BatchStepResponse response;
    try {
      call(options, "POST", "/v1/batch/step", &request, response);
      if (response.results_size() != static_cast<int>(envs.size())) {
        throw Error(where() + " POST /v1/batch/step", "results",
                    std::to_string(response.results_size()) + " results for " + std::to_string(envs.size()) +
                        " steps");
      }
    } catch (const Error& e) {
      for (RemoteEnv* env : envs) env->prefetched_->error = e;
      return;
    } catch (const std::exception& e) {  // prefetch() never throws (envs/env.h)
      for (RemoteEnv* env : envs)
        env->prefetched_->error = Error(where() + " POST /v1/batch/step", "", e.what());
      return;
    }
    for (size_t i = 0; i < envs.size(); ++i) {
      RemoteEnv& env = *envs[i];
      const proto::BatchStepResult& r = response.results(static_cast<int>(i));
      const std::string where = this->where() + " POST /v1/batch/step results[" + std::to_string(i) +
                                "] (episode " + quote(env.episode_id_) + ")";
      const uint32_t status = r.http_status() == 0 ? 200 : r.http_status();
      if (status != 200) {
        env.prefetched_->error = answer_error(where, static_cast<int>(status), r.error());
        continue;
      }
      try {
        env.prefetched_->result =
            to_result(r.response(), where, env.episode_id_, env.config_.max_observation_bytes);
        env.prefetched_->next_turn_id = r.response().next_turn_id();
      } catch (const Error& e) {
        env.prefetched_->error = e;
      }
    }
  }

  const std::string host_;
  int port_;
  const pid_t child_;
  std::atomic<bool> broken_{false};
  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<HttpConnection>> idle_;
  std::mutex info_mutex_;
  std::optional<proto::InfoResponse> info_;
};

}  // namespace remote

using remote::RemoteEndpoint;

RemoteEnv::RemoteEnv(RemoteConfig config) : config_(std::move(config)) {
  spec_.name = "remote";
  spec_.description = "an environment in another process, over the server's HTTP step protocol";
  spec_.params = param_specs();
  spec_.has_text = true;
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
      {"host", ParamType::kString, "127.0.0.1", "IPv4 address of the environment process"},
      {"port", ParamType::kInt, "0", "its TCP port; 0: start `command` and use the port it prints"},
      {"command", ParamType::kString, "/usr/bin/python3 clients/python/crl_remote_env.py --port 0",
       "started with /bin/sh when port = 0; must print \"PORT <n>\" as its first line"},
      {"env", ParamType::kString, "",
       "which environment of the process (\"\": the first GET /v1/info lists)"},
      {"wire", ParamType::kString, "json", "json | protobuf: the encoding of requests and answers"},
      {"batch", ParamType::kBool, "true", "send the steps of a lockstep round as one POST /v1/batch/step"},
      {"timeout_ms", ParamType::kInt, "10000", "per request"},
      {"start_timeout_ms", ParamType::kInt, "30000", "for the \"PORT <n>\" line of a started command"},
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
  request.set_task_id(remote::utf8(task.id));
  request.set_split(remote::utf8(task.split));
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
  start.system.text = remote::cap(response.prompt_text(), config_.max_observation_bytes);
  start.user.text = remote::cap(response.append_text(), config_.max_observation_bytes);
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
    request.mutable_action()->set_text(remote::utf8(action.text));
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
const EnvRegistrar kRegistrar({"remote",
                               "an environment in another process (the server's HTTP step protocol)",
                               RemoteEnv::param_specs(), [](const Params& params) -> std::unique_ptr<Env> {
                                 return std::make_unique<RemoteEnv>(RemoteEnv::config_from(params));
                               }});
}  // namespace

}  // namespace crl
