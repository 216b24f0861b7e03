#include "envs/remote/remote_env.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/error.h"
#include "envs/registry.h"

namespace crl {
namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace

RemoteEnv::RemoteEnv(RemoteConfig config) : config_(std::move(config)) {
  spec_.name = "remote";
  spec_.description = "an environment in another process, over line-delimited JSON on local TCP";
  spec_.params = param_specs();
  spec_.has_text = true;
  spec_.max_observation_bytes = config_.max_observation_bytes;
}

RemoteEnv::~RemoteEnv() {
  disconnect();
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

void RemoteEnv::spawn() {
  const std::string where = "remote environment command " + quote(config_.command);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(where, "command", std::string("pipe: ") + strerror(errno));
  std::vector<std::string> argv_s = {"sh", "-c", "exec " + config_.command};
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
  child_ = pid;
  // The first line must be "PORT <n>" within the timeout.
  std::string line;
  const auto deadline = Clock::now() + std::chrono::milliseconds(config_.timeout_ms);
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
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
    throw Error(where, "command", "did not print \"PORT <n>\" first (got " + quote(line.substr(0, 80)) + ")");
  }
  port_ = port;
}

std::vector<ParamSpec> RemoteEnv::param_specs() {
  return {
      {"host", ParamType::kString, "127.0.0.1", "IPv4 address of the environment process"},
      {"port", ParamType::kInt, "0", "its TCP port; 0: start `command` and use the port it prints"},
      {"command", ParamType::kString, "/usr/bin/python3 clients/python/crl_remote_env.py --port 0",
       "started with /bin/sh when port = 0; must print \"PORT <n>\" as its first line"},
      {"timeout_ms", ParamType::kInt, "10000", "per request"},
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
  c.timeout_ms = static_cast<int>(params.get_int("timeout_ms"));
  if (c.timeout_ms < 1) throw Error(where, "timeout_ms", "must be >= 1");
  const int64_t max_obs = params.get_int("max_observation_bytes");
  if (max_obs < 256) throw Error(where, "max_observation_bytes", "must be >= 256");
  c.max_observation_bytes = static_cast<size_t>(max_obs);
  return c;
}

void RemoteEnv::disconnect() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  buffer_.clear();
}

void RemoteEnv::connect_once() {
  if (fd_ >= 0) return;
  const std::string where = "remote environment " + config_.host + ":" + std::to_string(port_);
  if (port_ == 0) {
    if (config_.port != 0) {
      port_ = config_.port;
    } else if (child_ < 0) {
      spawn();
    } else {
      throw Error(where, "command", "the started environment process gave no port");
    }
  }
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw Error(where, "", std::string("socket: ") + strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port_));
  inet_pton(AF_INET, config_.host.c_str(), &address.sin_addr);
  if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const std::string why = strerror(errno);
    disconnect();
    throw Error(where, "", "cannot connect: " + why);
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string RemoteEnv::call(const std::string& line) {
  connect_once();
  const std::string where = "remote environment " + config_.host + ":" + std::to_string(port_);
  auto fail = [&](const std::string& why) {
    disconnect();
    throw Error(where, "", why);
  };
  const auto deadline = Clock::now() + std::chrono::milliseconds(config_.timeout_ms);
  auto wait = [&](short events) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) fail("no answer within " + std::to_string(config_.timeout_ms) + " ms");
    pollfd p{fd_, events, 0};
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready == 0) fail("no answer within " + std::to_string(config_.timeout_ms) + " ms");
    if (ready < 0 && errno != EINTR) fail(std::string("poll: ") + strerror(errno));
  };
  const std::string out = line + "\n";
  for (size_t sent = 0; sent < out.size();) {
    wait(POLLOUT);
    const ssize_t n = send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EINTR) fail(std::string("send: ") + strerror(errno));
    if (n > 0) sent += static_cast<size_t>(n);
  }
  for (;;) {
    const size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string reply = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return reply;
    }
    if (buffer_.size() > config_.max_line_bytes) fail("response line longer than the limit");
    wait(POLLIN);
    char chunk[65536];
    const ssize_t n = recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n == 0) fail("the environment process closed the connection");
    if (n < 0 && errno != EAGAIN && errno != EINTR) fail(std::string("recv: ") + strerror(errno));
    if (n > 0) buffer_.append(chunk, static_cast<size_t>(n));
  }
}

namespace {
nlohmann::json parse_reply(const std::string& reply, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(reply);
  } catch (const std::exception& e) {
    throw Error(where, "", std::string("malformed JSON reply: ") + e.what());
  }
  if (!j.is_object()) throw Error(where, "", "the reply is not a JSON object");
  if (j.contains("error"))
    throw Error(where, "error", j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump());
  return j;
}

std::string text_field(const nlohmann::json& j, const char* name, const std::string& where, bool required) {
  if (!j.contains(name)) {
    if (required) throw Error(where, name, "missing in the reply");
    return "";
  }
  if (!j[name].is_string()) throw Error(where, name, "expected a string, found " + j[name].dump());
  return j[name].get<std::string>();
}
}  // namespace

RemoteEnv::Start RemoteEnv::do_reset(const Task& task, Rng& rng) {
  const uint64_t seed = rng.next_u64();
  nlohmann::json request = {{"op", "reset"},
                            {"task", {{"id", task.id}, {"index", task.index}, {"split", task.split}}},
                            {"seed", std::to_string(seed)}};
  const std::string where = "remote reset of task " + quote(task.id);
  const nlohmann::json reply =
      parse_reply(call(request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)), where);
  Start start;
  start.system.text = cap(text_field(reply, "system", where, true), config_.max_observation_bytes);
  start.user.text = cap(text_field(reply, "user", where, true), config_.max_observation_bytes);
  return start;
}

StepResult RemoteEnv::do_step(const Action& action) {
  nlohmann::json request = {{"op", "step"}, {"action", action.text}};
  const std::string where = "remote step " + std::to_string(steps());
  const nlohmann::json reply =
      parse_reply(call(request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)), where);
  StepResult result;
  result.observation.text = cap(text_field(reply, "observation", where, true), config_.max_observation_bytes);
  result.info = text_field(reply, "info", where, false);
  try {
    result.reward = reply.value("reward", 0.0);
    result.terminated = reply.value("terminated", false);
    result.truncated = reply.value("truncated", false);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where, "", std::string("mistyped field: ") + e.what());
  }
  return result;
}

namespace {
const EnvRegistrar kRegistrar({"remote",
                               "an environment in another process (line-delimited JSON over local TCP)",
                               RemoteEnv::param_specs(), [](const Params& params) -> std::unique_ptr<Env> {
                                 return std::make_unique<RemoteEnv>(RemoteEnv::config_from(params));
                               }});
}  // namespace

}  // namespace crl
