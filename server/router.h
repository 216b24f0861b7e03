#pragma once
// Routing: one HTTP request (method, target, headers that matter, body) -> one answer (status, content type,
// body). Transport-free, so tests and the fuzz target drive it without sockets. Every failure becomes a typed
// ErrorBody; nothing escapes route().
//
//   GET    /health                      HealthResponse
//   GET    /metrics                     Prometheus text exposition (server/metrics.h)
//   GET    /v1/info                     InfoResponse
//   POST   /v1/episodes                 CreateEpisodeRequest -> StepResponse
//   POST   /v1/episodes/{id}/step       StepRequest -> StepResponse
//   GET    /v1/episodes/{id}            EpisodeState
//   GET    /v1/episodes/{id}/export     ExportResponse
//   DELETE /v1/episodes/{id}            DeleteResponse
//   POST   /v1/batch/step               BatchStepRequest -> BatchStepResponse
//   POST   /v1/rollouts                 RolloutsRequest -> RolloutsResponse (the engine drives an LLM server)
//   GET    /ui                          the trajectory viewer's page (server/ui_page.h)
//   GET    /v1/episodes, /v1/exports, /v1/exports/{id}: the viewer's lists, `crl serve --ui` only
//                                       (server/ui_routes.h; 404 ui_disabled otherwise)
//   GET    /schema, /metadata           OpenEnv's discovery routes (server/openenv_session.h); GET /ws with
//                                       Upgrade: websocket is an OpenEnv session (taken by the transport)
//   /v1/sessions..., /v1/chat/completions, /v1/messages: the compaction gateway, `crl serve --llm` only
//                                       (server/gateway/gateway.h; 404 gateway_disabled otherwise)
#include <functional>
#include <string>
#include <string_view>

#include "server/episode_service.h"

namespace crl::server {

namespace gateway {
class Gateway;
class StreamKeepalive;
}  // namespace gateway

// Writes one piece of a streamed body; false once the client can no longer receive it (stop producing).
using BodyWriter = std::function<bool(std::string_view piece)>;
// Begins an answer before its handler returns: sends the head (200, Transfer-Encoding: chunked, this
// content type) and gives the writer of the body's first pieces; what the handler then returns is the rest
// of the body (its status and content type unused), and the body ends when it returns.
using AnswerStarter = std::function<BodyWriter(std::string_view content_type)>;

struct HttpCall {
  std::string_view method;  // "GET", "POST", ...
  std::string_view target;  // path, optionally with a query string (ignored)
  std::string_view content_type;
  std::string_view accept;
  std::string_view body;
  bool draining = false;  // the server is shutting down (health says so)
  // For the gateway: its routes (null: `crl serve` without --llm), the Authorization header (a session id
  // as a Bearer token), x-api-key (the same for Anthropic clients) and X-SMG-Routing-Key (forwarded
  // upstream).
  gateway::Gateway* gateway = nullptr;
  std::string_view authorization = {};  // (default member initializers: callers without a gateway omit them)
  std::string_view routing_key = {};
  std::string_view api_key = {};
  // Set by a transport that can begin the answer early (a gateway call on a fiber: server/http_server.h);
  // null otherwise. The gateway uses it to keep a streamed call's client reading while the upstream samples
  // (gateway/stream_keepalive.h), and hands its keep-alive down in `keepalive`.
  const AnswerStarter* begin_answer = nullptr;
  gateway::StreamKeepalive* keepalive = nullptr;
};

struct HttpAnswer {
  int status = 200;
  std::string content_type;
  std::string body;
  double retry_after = 0;  // > 0: send a Retry-After header (429)
  // Set: the rest of the body is produced while it is sent (server-sent events as a model samples, `crl lm
  // serve`). The transport sends the head and `body` at once with Transfer-Encoding: chunked, then runs
  // `stream` on the worker that handled the request and sends each piece as soon as the connection is free
  // (pieces written meanwhile go out together); the body ends when it returns (if it throws, the
  // connection is closed before the last chunk, so the client sees a cut body, not a complete one).
  // HTTP/1.0 clients get the whole body once it ends. Never set by routes that run on an I/O thread.
  std::function<void(const BodyWriter&)> stream = {};
};

HttpAnswer route(EpisodeService& service, const HttpCall& call);
// A typed error answer outside routing (the transport's 400 for unparsable or ambiguously framed HTTP, 408,
// 413, 417, 431, 501 for a transfer coding other than chunked, 503 beyond --max-connections or at the drain
// deadline).
HttpAnswer error_answer(int status, const std::string& code, const std::string& message,
                        std::string_view accept);

}  // namespace crl::server
