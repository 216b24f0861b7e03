#pragma once
// One environment process at host:port, shared by every RemoteEnv that uses it (remote_env.h): a pool of
// keep-alive connections, the cached GET /v1/info, the StepBatcher of their steps (one POST /v1/batch/step
// per lockstep round), and, with port = 0, the process it started and stops. Plus the small conversions
// both files use: per-request options, error answers, step answers.
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "envs/env.h"
#include "envs/remote/http_connection.h"
#include "envs/remote/remote_env.h"
#include "proto/server.pb.h"
#include "wire/wire_codec.h"

namespace crl::remote {

// Per-request settings, taken from the calling environment's configuration.
struct CallOptions {
  std::chrono::milliseconds timeout{10000};
  wire::WireFormat format = wire::WireFormat::kJson;
  size_t max_response_bytes = 64u << 20;
};
CallOptions options_of(const RemoteConfig& c);

// An error answer (non-200) as a crl::Error naming the field the process named.
Error answer_error(const std::string& where, int status, const proto::ErrorBody& body);
// The result of a step from the process's answer (the field list of envs/remote/README.md).
StepResult to_result(const proto::StepResponse& r, const std::string& where, const std::string& episode_id,
                     size_t max_observation_bytes);

class RemoteEndpoint final : public StepBatcher {
 public:
  RemoteEndpoint(std::string host, int port, pid_t child)
      : host_(std::move(host)), port_(port), child_(child) {}
  // Stops a process it started: SIGTERM, up to 1 s, then SIGKILL of its process group.
  ~RemoteEndpoint() override;

  // The endpoint of a process that is already running (shared by host:port).
  static std::shared_ptr<RemoteEndpoint> attach(const std::string& host, int port);
  // Starts `command`, reads "PORT <n>" from its first line, and returns the endpoint that owns the process.
  static std::shared_ptr<RemoteEndpoint> spawn(const RemoteConfig& config);

  int port() const { return port_; }
  std::string where() const { return "remote environment " + host_ + ":" + std::to_string(port_); }
  // True after a transport failure (until an exchange succeeds again): nothing more is sent on cleanup.
  bool broken() const { return broken_.load(); }

  // Sends `request` (nullptr: no body) and decodes a 200 answer into `response`. Throws crl::Error naming
  // the endpoint, the request and, for an error answer or a malformed one, the field.
  void call(const CallOptions& options, std::string_view method, const std::string& target,
            const google::protobuf::Message* request, google::protobuf::Message& response);
  // GET /v1/info, fetched once and checked: the protocol version, at least one environment.
  const proto::InfoResponse& info(const CallOptions& options);
  // One /v1/batch/step per chunk of at most limits.max_batch steps (all of them when it is 0).
  void prefetch(std::span<const PendingStep> steps) override;

 private:
  static std::mutex& registry_mutex();
  static std::map<std::string, std::weak_ptr<RemoteEndpoint>>& registry();
  // Under registry_mutex().
  static void remember(const std::string& key, const std::shared_ptr<RemoteEndpoint>& endpoint);
  std::unique_ptr<HttpConnection> take(const CallOptions& options);
  void give_back(std::unique_ptr<HttpConnection> connection);
  void send_batch(const CallOptions& options, std::span<const PendingStep> steps);

  const std::string host_;
  int port_;
  pid_t child_;  // -1 when none (attached, or reaped by spawn() after a failed start)
  std::atomic<bool> broken_{false};
  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<HttpConnection>> idle_;
  std::mutex info_mutex_;
  std::optional<proto::InfoResponse> info_;
};

}  // namespace crl::remote
