#include "server/gateway/stream_keepalive.h"

#include <nlohmann/json.hpp>

#include "engine/sse.h"
#include "server/gateway/anthropic_codec.h"
#include "server/gateway/openai_answer.h"

namespace crl::server::gateway {

namespace {
constexpr std::string_view kComment = ": keep-alive\n\n";
}  // namespace

void StreamKeepalive::beat() {
  if (!active() || client_gone_) return;
  if (!begun_) {
    write_ = (*begin_)(kSseContentType);
    begun_ = true;
    if (metrics_ != nullptr) metrics_->stream_keepalives->add();
  }
  if (!write_(kComment)) client_gone_ = true;
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
      const nlohmann::json event = {
          {"type", "error"},
          {"code", error.code()},
          {"message", error.what()},
          {"param", error.param().empty() ? nlohmann::json() : nlohmann::json(error.param())},
          {"sequence_number", 0}};
      body = "event: error\ndata: " + event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
             "\n\n";
      break;
    }
  }
  return HttpAnswer{200, kSseContentType, std::move(body), 0};
}

}  // namespace crl::server::gateway
