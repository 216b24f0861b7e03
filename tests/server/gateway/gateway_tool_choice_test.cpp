// tool_choice enforced (server/gateway/tool_choice.h): each API's spelling read into one choice; required and
// a named function sent upstream as a JSON schema of an array of calls (vLLM's and SGLang's constraint) and
// the sampled array read back into the harness's calls; the window and the export keep the sampled array;
// impossible choices refused before anything is sampled.
#include "server/gateway/gateway_error.h"
#include "server/gateway/tool_call_format.h"
#include "server/gateway/tool_choice.h"
#include "tests/server/gateway/gateway_fixture.h"

namespace crl::server::gateway::testing {
namespace {

using nlohmann::ordered_json;

// Two OpenAI function tools; read_file's parameters refer to a $defs entry.
json choice_tools() {
  return json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "shell"},
          {"description", "run a command"},
          {"parameters",
           {{"type", "object"}, {"properties", {{"cmd", {{"type", "string"}}}}}, {"required", {"cmd"}}}}}}},
       {{"type", "function"},
        {"function",
         {{"name", "read"},
          {"parameters",
           {{"type", "object"},
            {"properties", {{"path", {{"$ref", "#/$defs/path"}}}}},
            {"$defs", {{"path", {{"type", "string"}}}}}}}}}}});
}

// The schema item of a call of `name` with `parameters`.
json call_item(const std::string& name, const json& parameters) {
  return {{"type", "object"},
          {"properties", {{"name", {{"type", "string"}, {"enum", {name}}}}, {"parameters", parameters}}},
          {"required", {"name", "parameters"}}};
}

// The tools' system prompt is ~900 byte tokens: a larger window than test_budget()'s, so that a rebuild
// keeps the newest steps.
GatewayOptions roomy() {
  GatewayOptions options;
  options.budget = Budget{3200, 800, 2, 128, 64, 1000};
  return options;
}

ToolChoice choice_of(ToolChoice (*read)(JsonView), const std::string& body) {
  const JsonDocument doc = JsonDocument::parse(body, "test body");
  return read(doc.root());
}

// The GatewayError's param of `f`, or "no error".
template <typename F>
std::string refused_param(F&& f) {
  try {
    f();
  } catch (const GatewayError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    return e.param();
  }
  return "no error";
}

TEST(ToolChoice, EachApisSpellingReadsToOneChoice) {
  const auto openai = [](const std::string& body) { return choice_of(read_openai_tool_choice, body); };
  const auto responses = [](const std::string& body) { return choice_of(read_responses_tool_choice, body); };
  const auto anthropic = [](const std::string& body) { return choice_of(read_anthropic_tool_choice, body); };
  const ToolChoice automatic{};
  const ToolChoice none{ToolChoiceMode::kNone, "", true};
  const ToolChoice required{ToolChoiceMode::kRequired, "", true};
  const ToolChoice shell{ToolChoiceMode::kNamed, "shell", true};
  const ToolChoice shell_alone{ToolChoiceMode::kNamed, "shell", false};
  EXPECT_EQ(openai("{}"), automatic);
  EXPECT_EQ(openai(R"({"tool_choice": null})"), automatic);
  EXPECT_EQ(openai(R"({"tool_choice": "auto"})"), automatic);
  EXPECT_EQ(openai(R"({"tool_choice": "none"})"), none);
  EXPECT_EQ(openai(R"({"tool_choice": "required"})"), required);
  EXPECT_EQ(openai(R"({"tool_choice": {"type": "function", "function": {"name": "shell"}}})"), shell);
  EXPECT_EQ(openai(R"({"tool_choice": {"type": "function", "function": {"name": "shell"}},
                       "parallel_tool_calls": false})"),
            shell_alone);
  EXPECT_EQ(responses(R"({"tool_choice": "required"})"), required);
  EXPECT_EQ(
      responses(R"({"tool_choice": {"type": "function", "name": "shell"}, "parallel_tool_calls": false})"),
      shell_alone);
  EXPECT_EQ(anthropic("{}"), automatic);
  EXPECT_EQ(anthropic(R"({"tool_choice": {"type": "auto"}})"), automatic);
  EXPECT_EQ(anthropic(R"({"tool_choice": {"type": "none"}})"), none);
  EXPECT_EQ(anthropic(R"({"tool_choice": {"type": "any"}})"), required);
  EXPECT_EQ(
      anthropic(R"({"tool_choice": {"type": "tool", "name": "shell", "disable_parallel_tool_use": true}})"),
      shell_alone);
  EXPECT_TRUE(required.forced() && shell.forced() && !automatic.forced() && !none.forced());
  EXPECT_TRUE(automatic.reads_calls() && required.reads_calls() && !none.reads_calls());

  const std::pair<std::string, std::string> bad_openai[] = {
      {R"({"tool_choice": "sometimes"})", "tool_choice"},
      {R"({"tool_choice": 1})", "tool_choice"},
      {R"({"tool_choice": {"type": "allowed_tools"}})", "tool_choice.type"},
      {R"({"tool_choice": {"function": {"name": "shell"}}})", "tool_choice.type"},
      {R"({"tool_choice": {"type": "function"}})", "tool_choice.function.name"},
      {R"({"tool_choice": {"type": "function", "function": {"name": ""}}})", "tool_choice.function.name"},
      {R"({"parallel_tool_calls": "no"})", "parallel_tool_calls"}};
  for (const auto& [body, param] : bad_openai) EXPECT_EQ(refused_param([&] { openai(body); }), param) << body;
  EXPECT_EQ(refused_param([&] { responses(R"({"tool_choice": {"type": "function", "name": 3}})"); }),
            "tool_choice.name");
  EXPECT_EQ(refused_param([&] { responses(R"({"tool_choice": {"type": "file_search"}})"); }),
            "tool_choice.type");
  const std::pair<std::string, std::string> bad_anthropic[] = {
      {R"({"tool_choice": "any"})", "tool_choice"},
      {R"({"tool_choice": {"type": "required"}})", "tool_choice.type"},
      {R"({"tool_choice": {"type": "tool"}})", "tool_choice.name"},
      {R"({"tool_choice": {"type": "any", "disable_parallel_tool_use": 1}})",
       "tool_choice.disable_parallel_tool_use"}};
  for (const auto& [body, param] : bad_anthropic)
    EXPECT_EQ(refused_param([&] { anthropic(body); }), param) << body;
}

TEST(ToolChoice, AForcedChoiceIsAnArrayOfTheToolsCalls) {
  const ordered_json tools = choice_tools();
  const json shell_parameters = choice_tools()[0]["function"]["parameters"];
  const json read_parameters = choice_tools()[1]["function"]["parameters"];
  const json defs = {{"path", {{"type", "string"}}}};
  EXPECT_EQ(json::parse(forced_calls_schema({ToolChoiceMode::kRequired, "", true}, tools)),
            json({{"type", "array"},
                  {"minItems", 1},
                  {"items",
                   {{"anyOf", {call_item("shell", shell_parameters), call_item("read", read_parameters)}}}},
                  {"$defs", defs}}));
  EXPECT_EQ(json::parse(forced_calls_schema({ToolChoiceMode::kNamed, "shell", false}, tools)),
            json({{"type", "array"},
                  {"minItems", 1},
                  {"maxItems", 1},
                  {"items", call_item("shell", shell_parameters)}}));
  // A tool without parameters (or with {}) takes an empty object.
  const ordered_json bare = ordered_json::array({{{"type", "function"}, {"function", {{"name", "now"}}}}});
  EXPECT_EQ(json::parse(forced_calls_schema({ToolChoiceMode::kRequired, "", true}, bare))["items"],
            call_item("now", {{"type", "object"}, {"properties", json::object()}}));
  // What cannot be forced.
  EXPECT_EQ(refused_param([&] {
              forced_calls_schema({ToolChoiceMode::kNamed, "rm", true}, tools);
            }),
            "tool_choice");
  EXPECT_EQ(refused_param([&] {
              forced_calls_schema({ToolChoiceMode::kRequired, "", true}, nullptr);
            }),
            "tool_choice");
  ordered_json clash = tools;
  clash.push_back({{"type", "function"},
                   {"function",
                    {{"name", "write"},
                     {"parameters", {{"type", "object"}, {"$defs", {{"path", {{"type", "integer"}}}}}}}}}});
  EXPECT_EQ(refused_param([&] {
              forced_calls_schema({ToolChoiceMode::kRequired, "", true}, clash);
            }),
            "tool_choice");
  // The clashing tool alone is fine.
  EXPECT_NO_THROW(forced_calls_schema({ToolChoiceMode::kNamed, "write", true}, clash));
}

TEST(ToolChoice, AForcedAnswerReadsAsCallsOrAsText) {
  const AssistantReply two = read_forced_calls(
      " [{\"name\": \"shell\", \"parameters\": {\"cmd\": \"ls\"}}, {\"name\": \"read\", \"arguments\": "
      "{\"path\": \"a\"}}]\n",
      "7_0");
  ASSERT_EQ(two.tool_calls.size(), 2u);
  EXPECT_EQ(two.content, "");
  EXPECT_EQ(two.tool_calls[0].id, "call_7_0_0");
  EXPECT_EQ(two.tool_calls[0].name, "shell");
  EXPECT_EQ(two.tool_calls[0].arguments, "{\"cmd\":\"ls\"}");
  EXPECT_EQ(two.tool_calls[1].name, "read");
  EXPECT_EQ(two.tool_calls[1].arguments, "{\"path\":\"a\"}");
  for (const std::string text :
       {"[{\"name\": \"shell\", \"parameters\": {\"cmd\": \"l",  // cut by max_tokens
        "[]", "{\"name\": \"shell\", \"parameters\": {}}", "[1]", "[{\"name\": 1, \"parameters\": {}}]",
        "[{\"name\": \"shell\"}]", "[{\"name\": \"shell\", \"parameters\": \"ls\"}]", "I will call shell."}) {
    const AssistantReply reply = read_forced_calls(text, "0_0");
    EXPECT_TRUE(reply.tool_calls.empty()) << text;
    EXPECT_EQ(reply.content, text);
  }
}

// A harness's forced calls through the gateway, on both upstream APIs: the schema goes upstream with the
// harness's call (never with a summary), the sampled array comes back as tool calls, the harness's copy and
// the tool's result continue the window, and the export holds exactly what was sampled.
TEST(GatewayToolChoice, RequiredIsSampledUnderTheCallsSchemaAndReadBack) {
  for (const llm::ApiKind api : {llm::ApiKind::kSglang, llm::ApiKind::kOpenAi}) {
    SCOPED_TRACE(llm::api_kind_name(api));
    Bench bench(api, {}, roomy());
    Harness h(bench.port(), "forced");
    const json tools = choice_tools();
    const std::string required = forced_calls_schema({ToolChoiceMode::kRequired, "", true}, tools);
    for (int t = 0; t < 12; ++t) {
      h.add("user", "FORCEDCALL turn " + std::to_string(t) + " " + std::string(40, 'z'));
      const json answer = h.turn({{"tools", tools}, {"tool_choice", "required"}});
      ASSERT_TRUE(answered_one_call(answer, "shell", {{"cmd", "ls -la"}}));
      EXPECT_TRUE(answer["choices"][0]["message"]["content"].is_null());
      EXPECT_EQ(json::parse(bench.upstream->calls().back().json_schema), json::parse(required));
      h.messages.push_back({{"role", "tool"},
                            {"tool_call_id", answer["choices"][0]["message"]["tool_calls"][0]["id"]},
                            {"content", "a b c"}});
      // The model's own turn after the result: free text again.
      const json next = h.turn({{"tools", tools}});
      EXPECT_EQ(next["choices"][0]["finish_reason"], "stop");
      EXPECT_TRUE(bench.upstream->calls().back().json_schema.empty());
    }
    // Two forced calls in a row (the same body tail: the session's kept body carries the choice).
    for (int t = 0; t < 2; ++t) {
      h.add("user", "FORCEDCALL in a row");
      const json answer = h.turn({{"tools", tools}, {"tool_choice", "required"}});
      ASSERT_TRUE(answered_one_call(answer, "shell", {{"cmd", "ls -la"}}));
      EXPECT_EQ(json::parse(bench.upstream->calls().back().json_schema), json::parse(required));
      h.messages.push_back({{"role", "tool"},
                            {"tool_call_id", answer["choices"][0]["message"]["tool_calls"][0]["id"]},
                            {"content", "ok"}});
    }
    h.turn({{"tools", tools}});
    EXPECT_EQ(h.state()["history_edits"], 0) << "the copies of forced calls continue the window";
    size_t summaries = 0;
    for (const crl::testing::LoggedCall& call : bench.upstream->calls()) {
      if (call.rid.find("/summarize/") == std::string::npos) continue;
      ++summaries;
      EXPECT_TRUE(call.json_schema.empty()) << "a summary is free text";
    }
    EXPECT_GE(summaries, 1u);
    ASSERT_EQ(h.reward(1.0).status, 200);
    const json exported = h.export_json();
    EXPECT_EQ(check_exact(exported, bench.upstream->calls()), bench.upstream->calls().size());
    check_masks(exported);
    // The window holds the array as sampled (byte tokenizer), not a template's rendering of the call.
    const auto tokenizer = make_tokenizer("byte");
    const std::string last = tokenizer->decode(ids_of(exported["segments"].back()["response_ids"]));
    EXPECT_NE(last.find("[{\"name\": \"shell\", \"parameters\": {\"cmd\": \"ls -la\"}}]"), std::string::npos);
  }
}

// A named function with parallel calls off: one item of that tool only. The same sampled text without a
// forced choice is text (the model's own format, hermes here, does not read it), and with two calls in the
// array under `required` both reach the harness.
TEST(GatewayToolChoice, ANamedFunctionNarrowsTheSchemaAndAutoLeavesTheArrayAsText) {
  Bench bench(llm::ApiKind::kSglang, {}, roomy());
  Harness h(bench.port(), "named");
  const json tools = choice_tools();
  h.add("user", "FORCEDCALL now");
  ASSERT_TRUE(
      answered_one_call(h.turn({{"tools", tools},
                                {"tool_choice", {{"type", "function"}, {"function", {{"name", "shell"}}}}},
                                {"parallel_tool_calls", false}}),
                        "shell", {{"cmd", "ls -la"}}));
  const json schema = json::parse(bench.upstream->calls().back().json_schema);
  EXPECT_EQ(schema["maxItems"], 1);
  EXPECT_EQ(schema["items"], call_item("shell", tools[0]["function"]["parameters"]));
  h.messages.push_back(
      {{"role", "tool"}, {"tool_call_id", h.messages.back()["tool_calls"][0]["id"]}, {"content", "x"}});
  h.add("user", "FORCEDCALL again, model's choice");
  const json free = h.turn({{"tools", tools}, {"tool_choice", "auto"}});
  EXPECT_EQ(free["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(free["choices"][0]["message"]["content"],
            "[{\"name\": \"shell\", \"parameters\": {\"cmd\": \"ls -la\"}}]");
  h.add("user", "FORCEDTWO");
  const json two = h.turn({{"tools", tools}, {"tool_choice", "required"}});
  const json& calls = two["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u) << two;
  EXPECT_EQ(calls[0]["function"]["name"], "shell");
  EXPECT_EQ(calls[1]["function"]["name"], "read");
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  h.messages.push_back({{"role", "tool"}, {"tool_call_id", calls[0]["id"]}, {"content", "1"}});
  h.messages.push_back({{"role", "tool"}, {"tool_call_id", calls[1]["id"]}, {"content", "2"}});
  h.turn({{"tools", tools}});
  EXPECT_EQ(h.state()["history_edits"], 0);
}

// Anthropic's any / tool and the Responses API's required / named function are forced the same way.
TEST(GatewayToolChoice, AnthropicAndResponsesChoicesAreForcedToo) {
  Bench bench;
  const json anthropic_tools = json::array(
      {{{"name", "shell"},
        {"input_schema", {{"type", "object"}, {"properties", {{"cmd", {{"type", "string"}}}}}}}}});
  server::testing::HttpClient client(bench.port());
  json body = {{"model", "claude-test"},
               {"max_tokens", 100},
               {"tools", anthropic_tools},
               {"tool_choice", {{"type", "tool"}, {"name", "shell"}, {"disable_parallel_tool_use", true}}},
               {"messages", json::array({{{"role", "user"}, {"content", "FORCEDCALL"}}})}};
  const auto reply = client.call("POST", "/v1/sessions/claude-forced/v1/messages", body.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json answer = json::parse(reply.body);
  EXPECT_EQ(answer["stop_reason"], "tool_use");
  ASSERT_EQ(answer["content"].size(), 1u);
  EXPECT_EQ(answer["content"][0]["type"], "tool_use");
  EXPECT_EQ(answer["content"][0]["input"], json({{"cmd", "ls -la"}}));
  const json schema = json::parse(bench.upstream->calls().back().json_schema);
  EXPECT_EQ(schema["maxItems"], 1);
  EXPECT_EQ(schema["items"]["properties"]["parameters"], anthropic_tools[0]["input_schema"]);
  body["tool_choice"] = {{"type", "any"}};
  body["messages"].push_back({{"role", "assistant"}, {"content", answer["content"]}});
  body["messages"].push_back({{"role", "user"},
                              {"content", json::array({{{"type", "tool_result"},
                                                        {"tool_use_id", answer["content"][0]["id"]},
                                                        {"content", "ok"}},
                                                       {{"type", "text"}, {"text", "FORCEDCALL"}}})}});
  const auto again = client.call("POST", "/v1/sessions/claude-forced/v1/messages", body.dump());
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body)["content"][0]["type"], "tool_use");
  EXPECT_FALSE(json::parse(bench.upstream->calls().back().json_schema).contains("maxItems"));
  EXPECT_EQ(json::parse(client.call("GET", "/v1/sessions/claude-forced").body)["history_edits"], 0);

  const json responses_body = {
      {"model", "test"},
      {"input", "FORCEDCALL"},
      {"tools",
       json::array({{{"type", "function"}, {"name", "shell"}, {"parameters", {{"type", "object"}}}}})},
      {"tool_choice", {{"type", "function"}, {"name", "shell"}}}};
  const auto response = client.call("POST", "/v1/sessions/codex-forced/v1/responses", responses_body.dump());
  ASSERT_EQ(response.status, 200) << response.body;
  const json output = json::parse(response.body)["output"];
  ASSERT_EQ(output.size(), 1u) << output;
  EXPECT_EQ(output[0]["type"], "function_call");
  EXPECT_EQ(output[0]["name"], "shell");
  EXPECT_EQ(json::parse(output[0]["arguments"].get<std::string>()), json({{"cmd", "ls -la"}}));
  EXPECT_EQ(json::parse(bench.upstream->calls().back().json_schema)["items"]["properties"]["name"]["enum"],
            json::array({"shell"}));
}

// What cannot be forced is a 400 naming tool_choice before anything is sampled or recorded: a session's
// first call creates no session, a later one leaves the session as it was.
TEST(GatewayToolChoice, ImpossibleChoicesAreRefusedBeforeAnythingIsSampled) {
  Bench bench;
  const json tools = choice_tools();
  const json named_rm = {{"type", "function"}, {"function", {{"name", "rm"}}}};
  const json json_object = {{"type", "json_object"}};
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"tools", tools}, {"tool_choice", named_rm}}, "tool_choice"},
      {{{"tool_choice", "required"}}, "tool_choice"},
      {{{"tools", tools}, {"tool_choice", "required"}, {"response_format", json_object}}, "tool_choice"},
      {{{"tools", tools}, {"tool_choice", "sometimes"}}, "tool_choice"},
      {{{"tools", tools}, {"tool_choice", {{"type", "allowed_tools"}}}}, "tool_choice.type"},
      {{{"tools", tools}, {"parallel_tool_calls", "yes"}}, "parallel_tool_calls"}};
  Harness fresh(bench.port(), "refused");
  fresh.add("user", "FORCEDCALL");
  for (const auto& [extra, param] : bad) {
    json body = {{"model", "test"}, {"messages", fresh.messages}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    const auto reply = fresh.post(body);
    EXPECT_EQ(reply.status, 400) << extra;
    EXPECT_EQ(json::parse(reply.body)["error"]["param"], param) << reply.body;
  }
  EXPECT_EQ(bench.upstream->calls().size(), 0u);
  EXPECT_EQ(fresh.client.call("GET", "/v1/sessions/refused").status, 404) << "no session was created";

  Harness h(bench.port(), "refused-later");
  h.turn({{"tools", tools}});
  const size_t sent = bench.upstream->calls().size();
  h.add("user", "FORCEDCALL");
  for (const auto& [extra, param] : bad) {
    json body = {{"model", "test"}, {"messages", h.messages}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    EXPECT_EQ(h.post(body).status, 400) << extra;
  }
  EXPECT_EQ(bench.upstream->calls().size(), sent);
  ASSERT_TRUE(answered_one_call(h.turn({{"tools", tools}, {"tool_choice", "required"}}), "shell",
                                {{"cmd", "ls -la"}}));
  EXPECT_EQ(h.state()["history_edits"], 0);
  EXPECT_EQ(h.state()["upstream_failures"], 0);
}

}  // namespace
}  // namespace crl::server::gateway::testing
