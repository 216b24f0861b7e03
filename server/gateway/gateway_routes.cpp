// The gateway's paths: which requests are its (is_gateway_path), the shape of their errors (api_of: OpenAI's,
// Anthropic's or the Responses API's, also for the transport's refusals), and the route table that sends
// each path to its handler (Gateway::route, Gateway::dispatch); the handlers are in gateway.cpp.
#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "server/gateway/call_answers.h"
#include "server/gateway/gateway.h"

namespace crl::server::gateway {

using json = nlohmann::json;

namespace {
std::vector<std::string_view> path_segments(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t at = 0;
  while (at < path.size()) {
    const size_t slash = path.find('/', at);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    if (end > at) parts.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  return parts;
}
}  // namespace

bool is_gateway_path(std::string_view path) {
  // The router's test (server/router.cpp), on the same split, without building the list (asked on every
  // request, before it is routed): the first two parts and the count.
  std::string_view first, second;
  size_t count = 0;
  for (size_t at = 0; at < path.size();) {
    const size_t slash = std::min(path.find('/', at), path.size());
    if (slash > at) {
      if (count == 0) first = path.substr(at, slash - at);
      if (count == 1) second = path.substr(at, slash - at);
      ++count;
    }
    at = slash + 1;
  }
  return count >= 2 && first == "v1" &&
         (second == "sessions" || (second == "chat" && count == 3) || second == "messages" ||
          (second == "completions" && count == 2) || (second == "responses" && count <= 3) ||
          (second == "models" && count <= 3));
}

namespace {
// The API a gateway path speaks (its errors' shape): /v1/messages[/count_tokens] and a session's
// .../v1/messages[/count_tokens] are Anthropic's, /v1/responses and a session's .../v1/responses the
// Responses API's, the rest OpenAI's. (By position: a session may be named "messages".)
StreamKeepalive::Api api_of(const std::vector<std::string_view>& parts) {
  const bool session = parts.size() >= 5 && parts[1] == "sessions" && parts[3] == "v1";
  const std::string_view route = session ? parts[4] : parts.size() >= 2 ? parts[1] : std::string_view();
  if (route == "messages") return StreamKeepalive::Api::kAnthropic;
  if (route == "responses") return StreamKeepalive::Api::kResponses;
  return StreamKeepalive::Api::kOpenAi;
}
}  // namespace

HttpAnswer gateway_refusal(std::string_view path, int status, const std::string& code,
                           const std::string& message) {
  const bool anthropic = api_of(path_segments(path)) == StreamKeepalive::Api::kAnthropic;
  const char* type =
      status == 413 || status == 431 || status == 400 ? "invalid_request_error" : "server_error";
  return error_answer(GatewayError(status, type, code, message), anthropic);
}

HttpAnswer Gateway::route(const HttpCall& call, const std::vector<std::string_view>& parts) {
  // Anthropic paths answer errors in Anthropic's shape; a streamed call whose stream has begun
  // (stream_keepalive.h) ends it with the API's error event instead.
  const StreamKeepalive::Api api = api_of(parts);
  const bool anthropic = api == StreamKeepalive::Api::kAnthropic;
  StreamKeepalive keepalive(call.begin_answer, options_.stream_keepalive_s, api, shared_.metrics,
                            options_.model);
  HttpCall with_keepalive = call;
  with_keepalive.keepalive = &keepalive;
  const auto failed = [&](const GatewayError& e) {
    return keepalive.begun() ? keepalive.error_event(e) : error_answer(e, anthropic);
  };
  try {
    return dispatch(with_keepalive, parts);
  } catch (const GatewayError& e) {
    return failed(e);
  } catch (const Error& e) {
    return failed(bad_request("bad_request", e.what(), e.field()));
  } catch (const std::exception& e) {
    return failed(GatewayError(500, "server_error", "internal", std::string("internal error: ") + e.what()));
  }
}

HttpAnswer Gateway::dispatch(const HttpCall& call, const std::vector<std::string_view>& parts) {
  // POST /v1/messages[/count_tokens]: the session is the Bearer token or the x-api-key.
  if (parts.size() >= 2 && parts[1] == "messages") {
    if (parts.size() == 3 && parts[2] == "count_tokens") return count_tokens(call);
    std::string id = bearer(call.authorization);
    if (id.empty()) id = std::string(call.api_key);
    if (parts.size() != 2 || id.empty()) {
      throw GatewayError(parts.size() != 2 ? 404 : 401, "invalid_request_error",
                         parts.size() != 2 ? "not_found" : "missing_session",
                         "no session: use /v1/sessions/{id}/v1/messages or send the session id as "
                         "Authorization: Bearer <session id> or x-api-key");
    }
    return messages(call, id);
  }
  // POST /v1/responses/input_tokens: a session (the Bearer token) only for a previous_response_id.
  if (parts.size() == 3 && parts[1] == "responses" && parts[2] == "input_tokens")
    return response_input_tokens(call, bearer(call.authorization));
  // POST /v1/chat/completions, /v1/completions, /v1/responses: the session is the Bearer token.
  const bool chat_path = parts.size() == 3 && parts[1] == "chat" && parts[2] == "completions";
  const bool responses_path = parts.size() == 2 && parts[1] == "responses";
  if (chat_path || responses_path || (parts.size() == 2 && parts[1] == "completions")) {
    const std::string id = bearer(call.authorization);
    if (id.empty()) {
      throw GatewayError(401, "invalid_request_error", "missing_session",
                         std::string("no session: use /v1/sessions/{id}/v1/") +
                             (chat_path        ? "chat/completions"
                              : responses_path ? "responses"
                                               : "completions") +
                             " or send the session id as Authorization: Bearer <session id>");
    }
    return chat_path ? chat(call, id) : responses_path ? responses(call, id) : completions(call, id);
  }
  // GET /v1/models[/{model}]: what harnesses and trainers' readiness checks ask of an OpenAI server.
  if (parts.size() >= 2 && parts[1] == "models") return models(call, std::span(parts).subspan(2));
  if (parts.size() >= 2 && parts[1] == "sessions") {
    if (parts.size() == 2) {
      require_method(call, "POST");
      return create(call);
    }
    const std::string id(parts[2]);
    if (parts.size() == 3) {
      if (call.method == "DELETE") {
        find(id);
        std::lock_guard lock(mutex_);
        sessions_.erase(id);
        return json_answer(200, json{{"session_id", id}, {"deleted", true}}.dump());
      }
      require_method(call, "GET");
      const auto session = find(id);
      SessionLock lock(*session);
      return json_answer(200, session->state().dump());
    }
    if (parts.size() == 4 && parts[3] == "reward") return reward(call, id);
    if (parts.size() == 4 && parts[3] == "export") {
      require_method(call, "GET");
      return export_session(call, id);
    }
    if (parts.size() == 6 && parts[3] == "v1" && parts[4] == "chat" && parts[5] == "completions")
      return chat(call, id);
    if (parts.size() == 5 && parts[3] == "v1" && parts[4] == "completions") return completions(call, id);
    if (parts.size() == 5 && parts[3] == "v1" && parts[4] == "messages") return messages(call, id);
    if (parts.size() == 5 && parts[3] == "v1" && parts[4] == "responses") return responses(call, id);
    if (parts.size() == 6 && parts[3] == "v1" && parts[4] == "messages" && parts[5] == "count_tokens")
      return count_tokens(call);
    if (parts.size() == 6 && parts[3] == "v1" && parts[4] == "responses" && parts[5] == "input_tokens")
      return response_input_tokens(call, id);
    if (parts.size() >= 5 && parts.size() <= 6 && parts[3] == "v1" && parts[4] == "models")
      return models(call,
                    std::span(parts).subspan(5));  // (a session's base URL; no session is made or needed)
  }
  throw GatewayError(404, "not_found_error", "not_found",
                     "no gateway endpoint " + std::string(call.target.substr(0, call.target.find('?'))) +
                         " (see server/gateway/gateway.h)");
}

}  // namespace crl::server::gateway
