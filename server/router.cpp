#include "server/router.h"

#include <chrono>

#include "engine/error.h"
#include "server/gateway/gateway.h"
#include "server/openenv_session.h"
#include "server/ui_page.h"
#include "server/ui_routes.h"
#include "wire/api_error.h"
#include "wire/wire_codec.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote

namespace {

// "/v1/episodes/ID/step" -> {"v1", "episodes", "ID", "step"}; empty segments are dropped.
std::vector<std::string_view> split_path(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::vector<std::string_view> parts;
  while (!target.empty()) {
    const size_t slash = target.find('/');
    const std::string_view part = target.substr(0, slash);
    if (!part.empty()) parts.push_back(part);
    if (slash == std::string_view::npos) break;
    target.remove_prefix(slash + 1);
  }
  return parts;
}

HttpAnswer encoded(const google::protobuf::Message& message, WireFormat format, int status = 200) {
  return HttpAnswer{status, std::string(content_type(format)), encode_message(message, format), 0};
}

HttpAnswer from_error(const ApiError& e, WireFormat format) {
  HttpAnswer answer;
  try {
    answer = encoded(e.body(), format, e.http_status());
  } catch (...) {  // never: error texts are valid UTF-8; but an error answer must not fail
    answer =
        HttpAnswer{500, std::string(kJsonContentType), R"({"code":"internal","message":"","field":""})", 0};
  }
  answer.retry_after = e.retry_after();
  return answer;
}

void require_allowed_method(std::string_view method, std::string_view allowed, std::string_view path) {
  if (method != allowed) {
    throw ApiError(405, "method_not_allowed",
                   std::string(method) + " is not allowed on " + std::string(path) + " (use " +
                       std::string(allowed) + ")",
                   "");
  }
}

// Observes the seconds from construction to destruction (a failed call is timed too).
class Timed {
 public:
  explicit Timed(Histogram* histogram) : histogram_(histogram), start_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    histogram_->observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  Histogram* histogram_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

HttpAnswer error_answer(int status, const std::string& code, const std::string& message,
                        std::string_view accept) {
  return from_error(ApiError(status, code, message), response_format(accept, WireFormat::kJson));
}

HttpAnswer route(EpisodeService& service, const HttpCall& call) {
  WireFormat answer_format = response_format(call.accept, WireFormat::kJson);
  try {
    const WireFormat request_format = format_from_content_type(call.content_type);
    answer_format = response_format(call.accept, request_format);
    const std::vector<std::string_view> parts = split_path(call.target);
    const std::string path(call.target.substr(0, call.target.find('?')));
    auto body_as = [&](auto& message) -> auto& {
      decode_message(call.body, request_format, message);
      return message;
    };

    if (parts.size() == 1 && parts[0] == "health") {
      require_allowed_method(call.method, "GET", path);
      return encoded(service.health(call.draining), answer_format);
    }
    if (parts.size() == 1 && parts[0] == "metrics") {
      require_allowed_method(call.method, "GET", path);
      return HttpAnswer{200, kMetricsContentType, service.metrics().render(), 0};
    }
    if (parts.size() == 1 && parts[0] == "ui") {
      require_allowed_method(call.method, "GET", path);
      return ui_page_answer();
    }
    // OpenEnv's discovery routes (server/openenv_session.h); its sessions are WebSocket upgrades of GET /ws,
    // which the transport takes before routing: a plain GET /ws gets 426.
    if (parts.size() == 1 && (parts[0] == "schema" || parts[0] == "metadata")) {
      require_allowed_method(call.method, "GET", path);
      return HttpAnswer{200, std::string(kJsonContentType),
                        parts[0] == "schema" ? openenv_schema_json() : openenv_metadata_json(service), 0};
    }
    if (parts.size() == 1 && parts[0] == "ws") {
      throw ApiError(426, "upgrade_required",
                     "/ws is OpenEnv's WebSocket session: send GET /ws with Upgrade: websocket", "");
    }
    if (auto lists = route_ui_lists(service, call, parts, answer_format)) return *lists;  // crl serve --ui
    if (gateway::is_gateway_path(path)) {
      if (call.gateway == nullptr) {
        throw ApiError(404, "gateway_disabled",
                       "the compaction gateway is off: start crl serve with --llm URL --api sglang|openai",
                       "");
      }
      return call.gateway->route(call, parts);
    }
    if (parts.size() >= 2 && parts[0] == "v1") {
      if (parts.size() == 2 && parts[1] == "info") {
        require_allowed_method(call.method, "GET", path);
        return encoded(service.info(), answer_format);
      }
      if (parts.size() == 2 && parts[1] == "episodes") {
        require_allowed_method(call.method, "POST", path);
        proto::CreateEpisodeRequest request;
        const Timed timed(service.metrics().create_seconds);
        return encoded(service.create(body_as(request)), answer_format);
      }
      if (parts.size() == 2 && parts[1] == "rollouts") {
        require_allowed_method(call.method, "POST", path);
        proto::RolloutsRequest request;
        const Timed timed(service.metrics().rollout_seconds);
        return encoded(service.rollouts(body_as(request)), answer_format);
      }
      if (parts.size() == 3 && parts[1] == "batch" && parts[2] == "step") {
        require_allowed_method(call.method, "POST", path);
        proto::BatchStepRequest request;
        const Timed timed(service.metrics().batch_step_seconds);
        return encoded(service.batch_step(body_as(request)), answer_format);
      }
      if (parts.size() >= 3 && parts[1] == "episodes") {
        const std::string id(parts[2]);
        if (parts.size() == 3) {
          if (call.method == "DELETE") return encoded(service.remove(id), answer_format);
          require_allowed_method(call.method, "GET", path);
          return encoded(service.state(id), answer_format);
        }
        if (parts.size() == 4 && parts[3] == "step") {
          require_allowed_method(call.method, "POST", path);
          proto::StepRequest request;
          const Timed timed(service.metrics().step_seconds);
          return encoded(service.step(id, body_as(request)), answer_format);
        }
        if (parts.size() == 4 && parts[3] == "export") {
          require_allowed_method(call.method, "GET", path);
          return encoded(service.export_segments(id), answer_format);
        }
      }
    }
    throw ApiError(
        404, "not_found",
        "no endpoint " + path +
            " (see GET /v1/info; endpoints: /health, /metrics, /v1/info, /v1/episodes, /v1/episodes/{id}, "
            "/v1/episodes/{id}/step, /v1/episodes/{id}/export, /v1/batch/step, /v1/rollouts, /ui, /schema, "
            "/metadata, /ws)",
        "");
  } catch (const ApiError& e) {
    return from_error(e, answer_format);
  } catch (const Error& e) {
    return from_error(ApiError(400, "bad_request", e.what(), e.field()), answer_format);
  } catch (const std::exception& e) {
    return from_error(ApiError(500, "internal", std::string("internal error: ") + e.what()), answer_format);
  }
}

}  // namespace crl::server
