#include "server/openenv_session.h"

#include <nlohmann/json.hpp>

#include "engine/json_reader.h"
#include "engine/utf8.h"
#include "server/router.h"

namespace crl::server {

using nlohmann::json;

namespace {

constexpr std::string_view kJson = "application/json";

std::string error_text(std::string_view code, const std::string& message, json extra = json::object()) {
  json data = std::move(extra);
  data["message"] = valid_utf8(message);  // (a parser's message may quote the bytes it stopped at)
  data["code"] = code;
  return json{{"type", "error"}, {"data", std::move(data)}}.dump();
}

// An engine error answer (ErrorBody JSON) -> OpenEnv's error message.
std::string error_from(const HttpAnswer& answer) {
  json body;
  try {
    body = read_json(answer.body, "the engine's answer");
  } catch (const Error&) {
    body = json::object();
  }
  const std::string crl_code =
      body.is_object() ? body.value("code", std::string("http_error")) : "http_error";
  const std::string message = body.is_object() ? body.value("message", std::string()) : std::string();
  const std::string field = body.is_object() ? body.value("field", std::string()) : std::string();
  std::string_view code = "EXECUTION_ERROR";
  if (answer.status == 429) {
    code = "CAPACITY_REACHED";
  } else if (answer.status == 404 || answer.status == 410) {
    code = "SESSION_ERROR";
  } else if (answer.status >= 400 && answer.status < 500) {
    code = "VALIDATION_ERROR";
  }
  json extra = {{"crl_code", crl_code}, {"field", field}, {"status", answer.status}};
  if (answer.retry_after > 0) extra["retry_after"] = answer.retry_after;
  return error_text(code, message.empty() ? crl_code : message, std::move(extra));
}

// StepResponse JSON (snake_case field names, defaults omitted) -> OpenEnv's observation message.
std::string observation_text(const json& a, bool reset) {
  json obs = json::object();
  const auto ids = [&](const char* key) { return a.contains(key) ? a[key] : json::array(); };
  obs["action_ids"] = ids("action_ids");
  obs["append_ids"] = ids("append_ids");
  obs["append_text"] = a.value("append_text", std::string());
  const bool rebuilt = a.value("prompt_rebuilt", false) || reset;
  obs["prompt_rebuilt"] = rebuilt;
  if (a.contains("prompt_ids") && !a["prompt_ids"].empty()) {
    obs["prompt_ids"] = a["prompt_ids"];
    obs["prompt_text"] = a.value("prompt_text", std::string());
  }
  obs["role"] = a.value("role", std::string());
  obs["max_new_tokens"] = a.value("max_new_tokens", 0);
  const std::string kind = a.value("kind", std::string());
  json meta = {{"kind", kind},
               {"compaction_request", kind == "compaction_request"},
               {"episode_id", a.value("episode_id", std::string())},
               {"turn_id", a.value("turn_id", 0)},
               {"next_turn_id", a.value("next_turn_id", 0)},
               {"state_hash", a.value("state_hash", std::string())},
               {"status", a.value("status", std::string())},
               {"reason", a.value("reason", std::string())},
               {"compactions", a.value("compactions", 0)},
               {"turn", a.value("turn", 0)},
               {"terminated", a.value("terminated", false)},
               {"truncated", a.value("truncated", false)},
               {"rollout_id", a.value("rollout_id", std::string())},
               {"task_id", a.value("task_id", std::string())}};
  json data = {{"observation", std::move(obs)},
               {"reward", reset ? json(nullptr) : json(a.value("reward", 0.0))},
               {"done", kind == "done"},
               {"metadata", std::move(meta)}};
  return json{{"type", "observation"}, {"data", std::move(data)}}.dump();
}

HttpAnswer call(EpisodeService& service, std::string_view method, const std::string& target,
                const std::string& body) {
  return route(service, HttpCall{method, target, kJson, kJson, body, false});
}

json parse_answer(const HttpAnswer& answer) {
  json a = read_json(answer.body, "the engine's answer");
  return a.is_object() ? a : json::object();
}

}  // namespace

void OpenEnvSession::end() {
  if (episode_id_.empty()) return;
  call(service_, "DELETE", "/v1/episodes/" + episode_id_, "");  // gone already: nothing to do
  episode_id_.clear();
  pending_kind_.clear();
  next_turn_id_ = 0;
}

OpenEnvReply OpenEnvSession::handle(std::string_view message) {
  // Text frames are UTF-8 (RFC 6455; Beast's reader refuses others before they get here); the JSON reader
  // refuses them too, but its message quotes the bytes it stopped at, which made writing the answer throw.
  if (!is_valid_utf8(message)) return {error_text("INVALID_JSON", "the message is not valid UTF-8")};
  json msg;
  try {
    msg = read_json(message, "the WebSocket message");
  } catch (const Error& e) {
    return {error_text("INVALID_JSON", std::string("Invalid JSON: ") + e.what())};
  }
  if (!msg.is_object() || !msg.contains("type") || !msg["type"].is_string()) {
    return {error_text("VALIDATION_ERROR", "a message is a JSON object {\"type\": ..., \"data\": {...}}")};
  }
  for (const auto& [key, value] : msg.items()) {
    if (key != "type" && key != "data") {
      return {error_text("VALIDATION_ERROR",
                         "unknown field \"" + key + "\" in the message (allowed: type, data)",
                         {{"field", key}})};
    }
  }
  const std::string type = msg["type"].get<std::string>();
  json data = msg.contains("data") ? msg["data"] : json::object();
  if (!data.is_object()) {
    return {error_text("VALIDATION_ERROR", "\"data\" must be a JSON object", {{"field", "data"}})};
  }
  try {
    if (type == "reset") {
      if (data.contains("episode_id")) {
        if (!data["episode_id"].is_string()) {
          return {error_text("VALIDATION_ERROR", "episode_id must be a string", {{"field", "episode_id"}})};
        }
        data["rollout_id"] = data["episode_id"];
        data.erase("episode_id");
      }
      if (!data.contains("env") && !default_env_.empty()) data["env"] = default_env_;
      end();  // OpenEnv's reset restarts the session's episode
      const HttpAnswer answer = call(service_, "POST", "/v1/episodes", data.dump());
      if (answer.status >= 400) return {error_from(answer)};
      const json a = parse_answer(answer);
      episode_id_ = a.value("episode_id", std::string());
      next_turn_id_ = a.value("next_turn_id", 0u);
      pending_kind_ = a.value("kind", std::string());
      return {observation_text(a, true)};
    }
    if (type == "step") {
      if (episode_id_.empty()) {
        return {error_text("SESSION_ERROR", "no episode in this session: send {\"type\": \"reset\"} first")};
      }
      if (!data.contains("kind"))
        data["kind"] = pending_kind_ == "compaction_request" ? "summary" : "assistant";
      const json body = {{"turn_id", next_turn_id_}, {"action", std::move(data)}};
      const HttpAnswer answer = call(service_, "POST", "/v1/episodes/" + episode_id_ + "/step", body.dump());
      if (answer.status == 404 || answer.status == 410) episode_id_.clear();  // reaped or lost: start again
      if (answer.status >= 400) return {error_from(answer)};
      const json a = parse_answer(answer);
      next_turn_id_ = a.value("next_turn_id", next_turn_id_);
      pending_kind_ = a.value("kind", std::string());
      return {observation_text(a, false)};
    }
    if (type == "state") {
      if (episode_id_.empty()) {
        return {error_text("SESSION_ERROR", "no episode in this session: send {\"type\": \"reset\"} first")};
      }
      const HttpAnswer answer = call(service_, "GET", "/v1/episodes/" + episode_id_, "");
      if (answer.status >= 400) return {error_from(answer)};
      json state = parse_answer(answer);
      state["episode_id"] = episode_id_;
      // OpenEnv's step_count: the execution turns taken (the state's current answer says).
      state["step_count"] =
          state.contains("current") && state["current"].is_object() ? state["current"].value("turn", 0) : 0;
      return {json{{"type", "state"}, {"data", std::move(state)}}.dump()};
    }
    if (type == "close") {
      end();
      return {"", true};
    }
  } catch (const Error& e) {  // an engine answer that is not JSON: never expected, never fatal
    return {error_text("EXECUTION_ERROR", e.what())};
  }
  return {error_text("UNKNOWN_TYPE", "Unknown message type: " + type + " (reset, step, state, close)")};
}

std::string openenv_schema_json() {
  const json ids = {{"type", "array"}, {"items", {{"type", "integer"}, {"minimum", 0}}}};
  const json action = {
      {"title", "CrlAction"},
      {"type", "object"},
      {"description",
       "One action: text (tokenized by the engine) or the exact sampled token_ids with their logprobs."},
      {"properties",
       {{"text", {{"type", "string"}}},
        {"token_ids", ids},
        {"logprobs", {{"type", "array"}, {"items", {{"type", "number"}}}}},
        {"finish_reason", {{"type", "string"}, {"enum", {"stop", "length", "abort"}}}},
        {"kind", {{"type", "string"}, {"enum", {"assistant", "summary"}}}}}},
      {"additionalProperties", false}};
  const json observation = {{"title", "CrlObservation"},
                            {"type", "object"},
                            {"properties",
                             {{"action_ids", ids},
                              {"append_ids", ids},
                              {"append_text", {{"type", "string"}}},
                              {"prompt_rebuilt", {{"type", "boolean"}}},
                              {"prompt_ids", ids},
                              {"prompt_text", {{"type", "string"}}},
                              {"role", {{"type", "string"}, {"enum", {"execute", "summarize", ""}}}},
                              {"max_new_tokens", {{"type", "integer"}}}}}};
  const json state = {
      {"title", "CrlState"},
      {"type", "object"},
      {"properties",
       {{"episode_id", {{"type", "string"}}}, {"step_count", {{"type", "integer"}, {"minimum", 0}}}}},
      {"additionalProperties", true}};
  return json{{"action", action}, {"observation", observation}, {"state", state}}.dump();
}

std::string openenv_metadata_json(const EpisodeService& service) {
  std::string names;
  const proto::InfoResponse info = service.info();  // kept alive: the loop reads its members
  for (const auto& env : info.environments()) names += (names.empty() ? "" : ", ") + env.name();
  return json{
      {"name", "crl"},
      {"description",
       "CompactionRL environments with budgeted contexts and compaction (environments: " + names +
           "). Reset data picks one: {\"env\": NAME, \"task_id\" | \"split\" + \"index\", \"seed\"}."},
      {"readme_content", nullptr},
      {"version", CRL_VERSION},
      {"author", nullptr},
      {"documentation_url", nullptr}}
      .dump();
}

}  // namespace crl::server
