#include "envs/remote/remote_endpoint.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "envs/text_cut.h"
#include "wire/api_error.h"
#include "wire/utf8.h"

namespace crl::remote {

namespace {

using Clock = std::chrono::steady_clock;
using wire::WireFormat;

// The protocol version this client speaks (the server's kProtocolVersion, server/episode_service.h).
constexpr const char* kProtocolVersion = "1";
// Idle keep-alive connections kept per endpoint (one per thread that drives episodes is enough).
constexpr size_t kMaxIdleConnections = 64;

}  // namespace

CallOptions options_of(const RemoteConfig& c) {
  return CallOptions{std::chrono::milliseconds(c.timeout_ms),
                     c.wire == "protobuf" ? WireFormat::kProtobuf : WireFormat::kJson, c.max_response_bytes};
}

Error answer_error(const std::string& where, int status, const proto::ErrorBody& body) {
  std::string message = "HTTP " + std::to_string(status);
  if (!body.code().empty()) message += " " + body.code();
  if (!body.message().empty()) message += ": " + body.message();
  return Error(where, body.field(), message);
}

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
  result.observation.text = cut_middle(r.append_text(), max_observation_bytes);
  result.reward = r.reward();
  result.terminated = r.terminated();
  result.truncated = r.truncated();
  result.info = r.reason();
  return result;
}

RemoteEndpoint::~RemoteEndpoint() {
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

std::shared_ptr<RemoteEndpoint> RemoteEndpoint::attach(const std::string& host, int port) {
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

std::shared_ptr<RemoteEndpoint> RemoteEndpoint::spawn(const RemoteConfig& config) {
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
  bool closed = false;  // its stdout reached end of file
  const auto deadline = Clock::now() + std::chrono::milliseconds(config.start_timeout_ms);
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fds[0], POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char c[256];
    const ssize_t n = read(fds[0], c, sizeof c);
    if (n <= 0) {
      closed = true;
      break;
    }
    line.append(c, static_cast<size_t>(n));
  }
  close(fds[0]);
  int port = 0;
  if (std::sscanf(line.c_str(), "PORT %d", &port) != 1 || port <= 0 || port > 65535) {
    std::string why = "did not print \"PORT <n>\" first (got " + quote(line.substr(0, 80)) + ")";
    // A command that ended at once (a script path relative to another directory, a missing interpreter)
    // explains itself on stderr, which is this process's; its exit status and the directory it ran in are
    // what fits in the error.
    int status = 0;
    for (int i = 0; closed && i < 50; ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        kill(-pid, SIGKILL);    // anything it left running in its process group
        endpoint->child_ = -1;  // reaped: the destructor has nothing more to stop
        why += WIFEXITED(status) ? "; it exited with status " + std::to_string(WEXITSTATUS(status))
                                 : "; it was killed by signal " + std::to_string(WTERMSIG(status));
        break;
      }
      usleep(2000);
    }
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd) != nullptr) why += "; it ran in " + quote(cwd);
    throw Error(where, "command", why + " (its stderr goes to the server's stderr)");
  }
  endpoint->port_ = port;
  std::lock_guard lock(registry_mutex());
  remember(config.host + ":" + std::to_string(port), endpoint);
  return endpoint;
}

void RemoteEndpoint::call(const CallOptions& options, std::string_view method, const std::string& target,
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

const proto::InfoResponse& RemoteEndpoint::info(const CallOptions& options) {
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

void RemoteEndpoint::prefetch(std::span<const PendingStep> steps) {
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

std::mutex& RemoteEndpoint::registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, std::weak_ptr<RemoteEndpoint>>& RemoteEndpoint::registry() {
  static std::map<std::string, std::weak_ptr<RemoteEndpoint>> endpoints;
  return endpoints;
}
void RemoteEndpoint::remember(const std::string& key, const std::shared_ptr<RemoteEndpoint>& endpoint) {
  auto& known = registry();
  std::erase_if(known, [](const auto& entry) { return entry.second.expired(); });
  known[key] = endpoint;
}

std::unique_ptr<HttpConnection> RemoteEndpoint::take(const CallOptions& options) {
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

void RemoteEndpoint::give_back(std::unique_ptr<HttpConnection> connection) {
  std::lock_guard lock(pool_mutex_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(connection));
}

void RemoteEndpoint::send_batch(const CallOptions& options, std::span<const PendingStep> steps) {
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
    item->mutable_action()->set_text(wire::valid_utf8(step.action.text));
    envs.push_back(env);
  }
  if (envs.empty()) return;
  proto::BatchStepResponse response;
  try {
    call(options, "POST", "/v1/batch/step", &request, response);
    if (response.results_size() != static_cast<int>(envs.size())) {
      throw Error(
          where() + " POST /v1/batch/step", "results",
          std::to_string(response.results_size()) + " results for " + std::to_string(envs.size()) + " steps");
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

}  // namespace crl::remote
