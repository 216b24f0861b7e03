#pragma once
// The gateway's test bench: a stand-in upstream (tests/policies/llm/scripted_llm_server.h, speaking SGLang
// /generate and OpenAI /v1/completions byte for byte) with a scripted harness model, and an in-process
// `crl serve --llm` on loopback; plus a harness that keeps the whole message list like real agents do.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/gateway/gateway.h"
#include "tests/policies/llm/scripted_llm_server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace crl::server::gateway::testing {

using json = nlohmann::json;

// The small budget of the tests (byte tokenizer: one token per byte). A turn is about 70 tokens, so the
// trigger (C - |h| < T_comp, |h| > 1000) fires every few turns and a rebuild keeps two steps.
inline Budget test_budget() {
  return Budget{1600, 600, 2, 128, 64, 1000};
}

// The harness model: a summary when asked for one, a tool call when the last message asks for one,
// otherwise "ack <marker> <n>" where the marker is the session's (from the first user message) and n counts
// the assistant turns in the prompt.
inline std::string harness_script(std::string_view prompt, uint64_t) {
  const size_t last_user = prompt.rfind("<|im_start|>user\n");
  const std::string_view tail = last_user == std::string_view::npos ? prompt : prompt.substr(last_user);
  if (tail.find("Write a summary") != std::string_view::npos) {
    size_t turns = 0;
    for (size_t at = prompt.find("ack "); at != std::string_view::npos; at = prompt.find("ack ", at + 1))
      ++turns;
    return "SUMMARY seen=" + std::to_string(turns);
  }
  if (tail.find("please call the tool") != std::string_view::npos)
    return "<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls -la\"}}\n</tool_call>";
  std::string marker = "none";
  const size_t m = prompt.find("marker=");
  if (m != std::string_view::npos) marker = std::string(prompt.substr(m + 7, prompt.find(' ', m) - m - 7));
  size_t turns = 0;
  for (size_t at = prompt.find("<|im_start|>assistant"); at != std::string_view::npos;
       at = prompt.find("<|im_start|>assistant", at + 1))
    ++turns;
  return "ack " + marker + " " + std::to_string(turns - 1);  // the last header opens this answer
}

struct Bench {
  explicit Bench(llm::ApiKind api = llm::ApiKind::kSglang, crl::testing::FaultOptions faults = {},
                 GatewayOptions gateway_options = {}, HttpOptions http = {}) {
    crl::testing::ScriptedLlmOptions llm_options;
    llm_options.script = harness_script;
    llm_options.faults = faults;
    upstream = std::make_unique<crl::testing::ScriptedLlmServer>(llm_options);
    gateway_options.upstream.api = api;
    gateway_options.upstream.base_url = upstream->url();
    if (gateway_options.budget.capacity == Budget{}.capacity) gateway_options.budget = test_budget();
    gateway = std::make_unique<Gateway>(gateway_options, nullptr);
    http.gateway = gateway.get();
    server = std::make_unique<server::testing::TestServer>(http);
  }
  uint16_t port() const { return server->port(); }

  std::unique_ptr<crl::testing::ScriptedLlmServer> upstream;
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<server::testing::TestServer> server;
};

// An agent harness: the whole history every call, the answer appended as the harness's copy.
struct Harness {
  Harness(uint16_t port, std::string id, std::string marker = "m0") : client(port), id(std::move(id)) {
    messages = json::array({{{"role", "system"}, {"content", "You are a test agent."}},
                            {{"role", "user"}, {"content", "marker=" + marker + " do the task"}}});
  }
  std::string path() const { return "/v1/sessions/" + id + "/v1/chat/completions"; }
  server::testing::Reply post(const json& body) { return client.call("POST", path(), body.dump()); }
  // One call; on success the answer's message is appended to the history.
  json turn(json extra = json::object()) {
    json body = {{"model", "test"}, {"messages", messages}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    last = post(body);
    EXPECT_EQ(last.status, 200) << last.body;
    if (last.status != 200) return json();
    json answer = json::parse(last.body);
    json message = answer["choices"][0]["message"];
    messages.push_back(message);
    return answer;
  }
  void add(const std::string& role, const std::string& content) {
    messages.push_back({{"role", role}, {"content", content}});
  }
  server::testing::Reply reward(double r, const std::string& status = "completed") {
    return client.call("POST", "/v1/sessions/" + id + "/reward",
                       json{{"reward", r}, {"status", status}}.dump());
  }
  json export_json() {
    const auto reply = client.call("GET", "/v1/sessions/" + id + "/export");
    EXPECT_EQ(reply.status, 200) << reply.body;
    return json::parse(reply.body);
  }
  json state() { return json::parse(client.call("GET", "/v1/sessions/" + id).body); }

  server::testing::HttpClient client;
  std::string id;
  json messages;
  server::testing::Reply last;
};

inline std::vector<TokenId> ids_of(const json& list) {
  std::vector<TokenId> out;
  for (const json& id : list) out.push_back(id.get<TokenId>());
  return out;
}

}  // namespace crl::server::gateway::testing
