#include "server/gateway/stream_keepalive.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "engine/sse.h"
#include "server/gateway/anthropic_codec.h"
#include "server/gateway/openai_answer.h"

namespace crl::server::gateway {

namespace {
constexpr std::string_view kComment = ": keep-alive\n\n";
}  // namespace

StreamKeepalive::StreamKeepalive(const AnswerStarter* begin, double period_s, Api api, ServerMetrics* metrics,
                                 std::string_view model)
    : begin_(begin), api_(api), metrics_(metrics), default_model_(model) {
  // (At most a day, as crl serve allows: a larger double would overflow the clock's duration.)
  if (period_s > 0)
    period_ = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(std::min(period_s, 86400.0)));
}

void StreamKeepalive::want() {
  // (The clock is read only for a streamed call: the others pay nothing.)
  if (!wanted_) next_beat_ = std::chrono::steady_clock::now() + period_;
  wanted_ = true;
}

std::chrono::steady_clock::time_point StreamKeepalive::due() const {
  return active() ? next_beat_ : std::chrono::steady_clock::time_point::max();
}

void StreamKeepalive::beat() {
  if (!active()) return;
  next_beat_ = std::chrono::steady_clock::now() + period_;
  write(kComment, metrics_ != nullptr ? metrics_->stream_keepalives : nullptr);
}

void StreamKeepalive::write(std::string_view piece, Counter* begins) {
  if (client_gone_) return;
  if (!begun_) {
    write_ = (*begin_)(kSseContentType);
    begun_ = true;
    if (begins != nullptr) begins->add();
  }
  if (!write_(piece)) client_gone_ = true;
}

void StreamKeepalive::send(std::string_view events) {
  if (!can_send()) return;
  if (period_ > std::chrono::steady_clock::duration::zero())
    next_beat_ = std::chrono::steady_clock::now() + period_;
  write(events, metrics_ != nullptr ? metrics_->streams_sent_live : nullptr);
}

HttpAnswer StreamKeepalive::error_event(const GatewayError& error) const {
  if (metrics_ != nullptr) metrics_->stream_failures_after_head->add();
  std::string body;
  switch (api_) {
    case Api::kOpenAi:  // vLLM's in-stream error, which the OpenAI SDK raises as an APIError
      body = "data: " + openai_error_json(error) + "\n\ndata: [DONE]\n\n";
      break;
    case Api::kAnthropic:
      body = "event: error\ndata: " + anthropic_error_json(error) + "\n\n";
      break;
    case Api::kResponses: {
      const auto dump = [](const nlohmann::json& event) {
        return event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      };
      const nlohmann::json event = {
          {"type", "error"},
          {"code", error.code()},
          {"message", error.what()},
          {"param", error.param().empty() ? nlohmann::json() : nlohmann::json(error.param())},
          {"sequence_number", 0}};
      // The failed response: no call was recorded, so its id is the failure's own (the time it failed, in
      // microseconds), never a recorded response's (previous_response_id finds only those).
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      const nlohmann::json failed = {
          {"type", "response.failed"},
          {"response",
           {{"created_at", std::chrono::duration_cast<std::chrono::seconds>(now).count()},
            {"error", {{"code", error.code()}, {"message", error.what()}}},
            {"id", "resp_failed_" +
                       std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(now).count())},
            {"incomplete_details", nullptr},
            {"model", model_.empty() ? std::string(default_model_) : model_},
            {"object", "response"},
            {"output", nlohmann::json::array()},
            {"status", "failed"},
            {"usage", nullptr}}},
          {"sequence_number", 1}};
      body =
          "event: error\ndata: " + dump(event) + "\n\nevent: response.failed\ndata: " + dump(failed) + "\n\n";
      break;
    }
  }
  return HttpAnswer{200, kSseContentType, std::move(body), 0};
}

}  // namespace crl::server::gateway
