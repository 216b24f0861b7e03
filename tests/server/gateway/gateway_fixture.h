#pragma once
// The gateway's test bench: a stand-in upstream (tests/policies/llm/scripted_llm_server.h, speaking SGLang
// /generate and OpenAI /v1/completions byte for byte) with a scripted harness model, and an in-process
// `crl serve --llm` on loopback; plus a harness that keeps the whole message list like real agents do.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/gateway/gateway.h"
#include "tests/policies/llm/scripted_llm_server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"
#include "tests/temp_dir.h"

namespace crl::server::gateway::testing {

using json = nlohmann::json;

// A test run on both of the gateway's paths (HttpOptions::gateway_inline): on fibers on the I/O threads
// (Inline) and on the worker pool (Pool). Instantiate with ::testing::Bool() and path_name.
class BothPaths : public ::testing::TestWithParam<bool> {
 protected:
  HttpOptions http() const {
    HttpOptions o;
    o.gateway_inline = GetParam();
    return o;
  }
};
inline std::string path_name(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Inline" : "Pool";
}

// The small budget of the tests (byte tokenizer: one token per byte). A turn is about 70 tokens, so the
// trigger (C - |h| < T_comp, |h| > 1000) fires every few turns and a rebuild keeps two steps.
// A ChatML template that refuses tool turns (raise_exception): a template that refuses the messages.
inline const char* const kRefusesToolTurns =
    "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}"
    "{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// A chat template's source written into `dir` as `name`; its path.
inline std::string write_template(const crl::test::TempDir& dir, const std::string& name,
                                  const std::string& source) {
  const std::string file = (dir.path() / name).string();
  std::ofstream(file) << source;
  return file;
}

// Gateway options whose chat template is the strict one above, written into `dir`.
inline GatewayOptions strict_template_options(const crl::test::TempDir& dir) {
  GatewayOptions options;
  options.chat_template = write_template(dir, "strict.jinja", kRefusesToolTurns);
  return options;
}

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
  // Stop strings: an answer that runs past the "\nObservation:" a ReAct harness stops on.
  if (tail.find("STOPTEST") != std::string_view::npos) return "run ls\nObservation: invented\nmore";
  // Sampled bytes that are not valid UTF-8 (a multi-byte character cut by max_tokens, a small model's
  // stray bytes): a truncated 3-byte sequence and a byte that never starts one.
  if (tail.find("BROKENUTF8") != std::string_view::npos) return "cut \xE2\x82 and \xFF end";
  if (tail.find("BROKENTOOL") != std::string_view::npos)
    return "<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls \xFF\"}}\n</tool_call>";
  // A tool call whose arguments are not a JSON object (a bare string): the Anthropic API answers an object.
  if (tail.find("STRINGARGS") != std::string_view::npos)
    return "<tool_call>\n{\"name\": \"shell\", \"arguments\": \"ls -la\"}\n</tool_call>";
  // Text and then a tool call in one answer (a Responses answer's message item and function_call item).
  if (tail.find("TEXTANDTOOL") != std::string_view::npos)
    return "Let me look.\n<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>";
  // A reasoning model's answers (server/gateway/reasoning_format.h): a call written while thinking, then
  // text; thinking, then a call.
  if (tail.find("THINKFIRST") != std::string_view::npos)
    return "<think>\nMaybe <tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": "
           "\"rm\"}}\n</tool_call> no.\n"
           "</think>\n\nack after thinking";
  if (tail.find("THINKCALL") != std::string_view::npos)
    return "<think>\nlist them\n</think>\n\n<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": "
           "\"ls\"}}"
           "\n</tool_call>";
  // Tool calls as other models write them (server/gateway/tool_call_format.h).
  if (tail.find("LLAMACALL") != std::string_view::npos)
    return "<|python_tag|>{\"name\": \"shell\", \"parameters\": {\"cmd\": \"ls -la\"}}";
  if (tail.find("CODERCALL") != std::string_view::npos)
    return "Listing.\n<tool_call>\n<function=shell>\n<parameter=cmd>\nls "
           "-la\n</parameter>\n<parameter=n>\n3\n"
           "</parameter>\n</function>\n</tool_call>";
  if (tail.find("PYTHONCALL") != std::string_view::npos) return "[shell(cmd='ls -la', n=3)]";
  if (tail.find("DEEPSEEKCALL") != std::string_view::npos)
    return "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>shell\n```json\n{\"cmd\": \"ls "
           "-la\"}"
           "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  // Calls as an upstream samples them under a forced tool_choice's grammar (server/gateway/tool_choice.h).
  if (tail.find("FORCEDCALL") != std::string_view::npos)
    return "[{\"name\": \"shell\", \"parameters\": {\"cmd\": \"ls -la\"}}]";
  if (tail.find("FORCEDTWO") != std::string_view::npos)
    return "[{\"name\": \"shell\", \"parameters\": {\"cmd\": \"ls\"}}, {\"name\": \"read\", "
           "\"parameters\": {\"path\": \"a.txt\"}}]";
  if (tail.find("please call the tool") != std::string_view::npos)
    return "<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls -la\"}}\n</tool_call>";
  std::string marker = "none";
  const size_t m = prompt.find("marker=");
  if (m != std::string_view::npos) marker = std::string(prompt.substr(m + 7, prompt.find(' ', m) - m - 7));
  size_t turns = 0;
  if (prompt.find("<|im_start|>") == std::string_view::npos) {  // a plain completion: count observations
    for (size_t at = prompt.find("Observation:"); at != std::string_view::npos;
         at = prompt.find("Observation:", at + 1))
      ++turns;
    return " ack " + marker + " " + std::to_string(turns);
  }
  for (size_t at = prompt.find("<|im_start|>assistant"); at != std::string_view::npos;
       at = prompt.find("<|im_start|>assistant", at + 1))
    ++turns;
  return "ack " + marker + " " + std::to_string(turns - 1);  // the last header opens this answer
}

struct Bench {
  // `upstream_options` adjusts the stand-in's options (its streams: ScriptedLlmOptions).
  explicit Bench(llm::ApiKind api = llm::ApiKind::kSglang, crl::testing::FaultOptions faults = {},
                 GatewayOptions gateway_options = {}, HttpOptions http = {}, ServiceOptions service = {},
                 ServerMetrics* metrics = nullptr,
                 const std::function<void(crl::testing::ScriptedLlmOptions&)>& upstream_options = {}) {
    crl::testing::ScriptedLlmOptions llm_options;
    llm_options.script = harness_script;
    llm_options.faults = faults;
    if (upstream_options) upstream_options(llm_options);
    upstream = std::make_unique<crl::testing::ScriptedLlmServer>(llm_options);
    gateway_options.upstream.api = api;
    gateway_options.upstream.base_url = upstream->url();
    if (gateway_options.budget.capacity == Budget{}.capacity) gateway_options.budget = test_budget();
    gateway = std::make_unique<Gateway>(gateway_options, metrics);
    http.gateway = gateway.get();
    server = std::make_unique<server::testing::TestServer>(http, service);
  }
  uint16_t port() const { return server->port(); }

  std::unique_ptr<crl::testing::ScriptedLlmServer> upstream;
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<server::testing::TestServer> server;
};

// An OpenAI stream (chat or plain completions) joined as a client joins it: the texts of its deltas in
// order, its tool calls, its finish reason, and where the first reasoning and content chunks were.
struct JoinedStream {
  std::string content, reasoning, finish;
  json tool_calls = json::array();
  size_t chunks = 0;  // chunks with a choice
  size_t first_reasoning = SIZE_MAX, first_content = SIZE_MAX;
  size_t content_chunks = 0;
  bool usage = false, done = false;
};
inline JoinedStream join_openai_stream(const std::string& body) {
  JoinedStream out;
  for (size_t at = body.find("data: "); at != std::string::npos; at = body.find("data: ", at + 1)) {
    const std::string payload = body.substr(at + 6, body.find("\n\n", at) - at - 6);
    if (payload == "[DONE]") {
      out.done = true;
      break;
    }
    const json chunk = json::parse(payload);
    if (chunk["choices"].empty()) {
      out.usage = chunk.contains("usage") && chunk["usage"].is_object();
      continue;
    }
    const json& choice = chunk["choices"][0];
    const json delta = choice.contains("delta") ? choice["delta"] : json::object();
    const auto text = [&](const json& value, std::string& into, size_t& first) {
      if (!value.is_string() || value.get<std::string>().empty()) return false;
      into += value.get<std::string>();
      first = std::min(first, out.chunks);
      return true;
    };
    if (delta.contains("reasoning_content"))
      text(delta["reasoning_content"], out.reasoning, out.first_reasoning);
    if (delta.contains("content") && text(delta["content"], out.content, out.first_content))
      ++out.content_chunks;
    if (choice.contains("text") && text(choice["text"], out.content, out.first_content)) ++out.content_chunks;
    if (delta.contains("tool_calls"))
      for (const json& call : delta["tool_calls"]) out.tool_calls.push_back(call);
    if (!choice["finish_reason"].is_null()) out.finish = choice["finish_reason"];
    ++out.chunks;
  }
  return out;
}

// Whether a chat completion answered exactly one call of `name` with `arguments` (as JSON).
inline ::testing::AssertionResult answered_one_call(const json& answer, const std::string& name,
                                                    const json& arguments) {
  if (answer.is_null()) return ::testing::AssertionFailure() << "no answer";
  const json& choice = answer["choices"][0];
  const json& calls = choice["message"]["tool_calls"];
  if (choice["finish_reason"] != "tool_calls" || !calls.is_array() || calls.size() != 1 ||
      calls[0]["function"]["name"] != name ||
      json::parse(calls[0]["function"]["arguments"].get<std::string>()) != arguments)
    return ::testing::AssertionFailure()
           << "not one call of " << name << " " << arguments.dump() << ": " << answer.dump();
  return ::testing::AssertionSuccess();
}

// A gateway for a real model's tokenizer and chat template (`spec`, `chat_template`: crl serve's
// --tokenizer and --chat-template), its answers scripted on the decoded prompt by `script` in that
// tokenizer's ids.
struct ModelBench {
  ModelBench(std::shared_ptr<const Tokenizer> model_tokenizer, const std::string& spec,
             const std::string& chat_template,
             std::function<std::string(std::string_view prompt, uint64_t seed)> script, Budget budget,
             const std::string& template_variables = "")
      : tokenizer(std::move(model_tokenizer)) {
    crl::testing::ScriptedLlmOptions llm;
    llm.script = std::move(script);
    llm.tokenizer = tokenizer;
    upstream = std::make_unique<crl::testing::ScriptedLlmServer>(llm);
    GatewayOptions options;
    options.upstream.base_url = upstream->url();
    options.tokenizer = spec;
    options.chat_template = chat_template;
    options.template_variables = template_variables;
    options.budget = budget;
    gateway = std::make_unique<Gateway>(options, nullptr);
    HttpOptions http;
    http.gateway = gateway.get();
    server = std::make_unique<server::testing::TestServer>(http);
  }
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<crl::testing::ScriptedLlmServer> upstream;
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<server::testing::TestServer> server;
};

// A harness's session: its client, id and last reply; the reward, export and state calls a trainer makes.
struct SessionClient {
  SessionClient(uint16_t port, std::string id) : client(port), id(std::move(id)) {}
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
  server::testing::Reply last;
};

// An agent harness: the whole history every call, the answer appended as the harness's copy.
struct Harness : SessionClient {
  Harness(uint16_t port, std::string id, std::string marker = "m0") : SessionClient(port, std::move(id)) {
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

  json messages;
};

// A plain-completion harness (ReAct style): the prompt is the whole text so far.
struct TextHarness : SessionClient {
  TextHarness(uint16_t port, std::string id, std::string marker = "p0")
      : SessionClient(port, std::move(id)),
        prompt("marker=" + marker + " Task: count the files.\nThought:") {}
  std::string path() const { return "/v1/sessions/" + id + "/v1/completions"; }
  server::testing::Reply post(const json& body) { return client.call("POST", path(), body.dump()); }
  json turn(json extra = json::object()) {
    json body = {{"model", "test"}, {"prompt", prompt}, {"max_tokens", 32}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    last = post(body);
    EXPECT_EQ(last.status, 200) << last.body;
    if (last.status != 200) return json();
    json answer = json::parse(last.body);
    prompt += answer["choices"][0]["text"].get<std::string>();
    return answer;
  }

  std::string prompt;
};

// `sessions` harnesses, a thread and a session each ("PREFIX-N", marker "PREFIXN"), make their first call at
// once; `meanwhile` runs on this thread while they are under way. Returns how many got their own answer.
inline int first_calls_at_once(const Bench& bench, int sessions, const std::string& prefix,
                               const std::function<void()>& meanwhile = {}) {
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int s = 0; s < sessions; ++s) {
    threads.emplace_back([&, s] {
      const std::string marker = prefix + std::to_string(s);
      Harness h(bench.port(), prefix + "-" + std::to_string(s), marker);
      const json answer = h.turn();
      if (h.last.status == 200 && answer["choices"][0]["message"]["content"] == "ack " + marker + " 0")
        ++answered;
    });
  }
  if (meanwhile) meanwhile();
  for (auto& t : threads) t.join();
  return answered.load();
}

inline std::vector<TokenId> ids_of(const json& list) {
  std::vector<TokenId> out;
  for (const json& id : list) out.push_back(id.get<TokenId>());
  return out;
}

// Every upstream call of one session matched against its export: an execution call's prompt is the
// segment's prompt plus the response so far, and what it sampled follows with loss mask 1 and the
// upstream's log-probs; a summary segment is exactly its call, fully trainable. Returns the calls matched.
inline size_t check_exact(const json& exported, const std::vector<crl::testing::LoggedCall>& calls) {
  size_t c = 0;
  int64_t sampled_calls = 0, masked = 0;
  for (const json& segment : exported["segments"]) {
    const std::vector<TokenId> prompt = ids_of(segment["prompt_ids"]);
    const std::vector<TokenId> response = ids_of(segment["response_ids"]);
    const std::vector<TokenId> mask = ids_of(segment["loss_mask"]);
    for (TokenId m : mask) masked += m;
    if (segment["kind"] == "summary") {
      EXPECT_LT(c, calls.size());
      if (c >= calls.size()) return c;
      EXPECT_NE(calls[c].rid.find("/summarize/"), std::string::npos);
      EXPECT_EQ(calls[c].prompt, prompt);
      EXPECT_EQ(calls[c].output, response);
      for (TokenId m : mask) EXPECT_EQ(m, 1);
      sampled_calls += static_cast<int64_t>(calls[c].output.size());
      ++c;
      continue;
    }
    std::vector<TokenId> full = prompt;
    full.insert(full.end(), response.begin(), response.end());
    bool first = true;
    while (c < calls.size() && calls[c].rid.find("/execute/") != std::string::npos &&
           calls[c].prompt.size() <= full.size() &&
           std::equal(calls[c].prompt.begin(), calls[c].prompt.end(), full.begin())) {
      if (first) {
        EXPECT_EQ(calls[c].prompt, prompt) << "a window opens with the prompt the export says";
      }
      first = false;
      const size_t at = calls[c].prompt.size() - prompt.size();
      EXPECT_LE(at + calls[c].output.size(), response.size());
      for (size_t i = 0; i < calls[c].output.size() && at + i < response.size(); ++i) {
        EXPECT_EQ(response[at + i], calls[c].output[i]);
        EXPECT_EQ(mask[at + i], 1);
        EXPECT_EQ(segment["rollout_log_probs"][at + i].get<float>(), calls[c].logprobs[i]);
      }
      sampled_calls += static_cast<int64_t>(calls[c].output.size());
      ++c;
    }
    EXPECT_FALSE(first) << "an execution segment with no upstream call";
  }
  EXPECT_EQ(c, calls.size()) << "every upstream call is in the export";
  EXPECT_EQ(masked, sampled_calls) << "trainable tokens are exactly the sampled ones";
  return c;
}

// Provenance 0 prompt, 1 environment, 2 sampled, 3 copied summary, 4 copied tail: only sampled is trainable.
inline void check_masks(const json& exported) {
  for (const json& segment : exported["segments"]) {
    const auto& provenance = segment["response_provenance"];
    for (size_t i = 0; i < provenance.size(); ++i) {
      const bool sampled = provenance[i] == "SAMPLED";
      EXPECT_EQ(segment["loss_mask"][i].get<int>(), sampled ? 1 : 0) << provenance[i];
    }
  }
}

}  // namespace crl::server::gateway::testing
