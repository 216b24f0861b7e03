// The Anthropic Messages API on the gateway's sessions: system, content blocks, tool_use / tool_result,
// streaming events, count_tokens, the session from x-api-key or a Bearer token, Anthropic-shaped errors.
#include "engine/tokenizer.h"
#include "tests/server/gateway/gateway_fixture.h"

namespace crl::server::gateway::testing {
namespace {

struct Claude {
  Claude(uint16_t port, std::string id) : client(port), id(std::move(id)) {}
  server::testing::Reply post(const json& body, const std::string& suffix = "") {
    return client.call("POST", "/v1/sessions/" + id + "/v1/messages" + suffix, body.dump());
  }
  server::testing::HttpClient client;
  std::string id;
};

const json kTools = json::array(
    {{{"name", "shell"}, {"description", "run a command"}, {"input_schema", {{"type", "object"}}}}});

// tool_choice {"type": "none"}: a text block, never tool_use.
TEST(GatewayAnthropic, ToolChoiceNoneAnswersText) {
  Bench bench;
  Claude c(bench.port(), "claude-none");
  const json body = {
      {"model", "claude-test"},
      {"max_tokens", 100},
      {"tools", kTools},
      {"tool_choice", {{"type", "none"}}},
      {"messages", json::array({{{"role", "user"}, {"content", "marker=a2 please call the tool"}}})}};
  const auto reply = c.post(body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json answer = json::parse(reply.body);
  EXPECT_EQ(answer["stop_reason"], "end_turn");
  ASSERT_EQ(answer["content"].size(), 1u);
  EXPECT_EQ(answer["content"][0]["type"], "text");
  EXPECT_NE(answer["content"][0]["text"].get<std::string>().find("<tool_call>"), std::string::npos);
}

// A thinking model's reasoning (--reasoning-parser) is a thinking block when the request enables thinking,
// as the API answers it (signature empty: the gateway cannot sign); not shown otherwise. The harness's
// copy, thinking block included, continues the window.
TEST(GatewayAnthropic, ThinkingBlocksWhenThinkingIsEnabled) {
  GatewayOptions options;
  options.reasoning_parser = "think";
  Bench bench(llm::ApiKind::kSglang, {}, options);
  Claude c(bench.port(), "claude-thinks");
  json body = {{"model", "claude-test"},
               {"max_tokens", 200},
               {"tools", kTools},
               {"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
               {"messages", json::array({{{"role", "user"}, {"content", "marker=a5 THINKCALL"}}})}};
  const auto first = c.post(body);
  ASSERT_EQ(first.status, 200) << first.body;
  const json answer = json::parse(first.body);
  ASSERT_EQ(answer["content"].size(), 2u) << answer;
  EXPECT_EQ(answer["content"][0], json({{"type", "thinking"}, {"thinking", "list them"}, {"signature", ""}}));
  EXPECT_EQ(answer["content"][1]["type"], "tool_use");
  EXPECT_EQ(answer["stop_reason"], "tool_use");
  body["messages"].push_back({{"role", "assistant"}, {"content", answer["content"]}});
  body["messages"].push_back({{"role", "user"},
                              {"content", json::array({{{"type", "tool_result"},
                                                        {"tool_use_id", answer["content"][1]["id"]},
                                                        {"content", "a"}}})}});
  body.erase("thinking");
  const auto second = c.post(body);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(json::parse(second.body)["content"][0]["type"], "text") << "not shown without thinking";
  EXPECT_EQ(json::parse(c.client.call("GET", "/v1/sessions/claude-thinks").body)["history_edits"], 0);
  // Streamed: the thinking block's thinking_delta and signature_delta, then the text block.
  body["messages"].push_back({{"role", "assistant"}, {"content", json::parse(second.body)["content"]}});
  body["messages"].push_back({{"role", "user"}, {"content", "THINKFIRST"}});
  body["thinking"] = {{"type", "adaptive"}};
  body["stream"] = true;
  const auto streamed = c.post(body);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const size_t start =
      streamed.body.find("\"content_block\":{\"signature\":\"\",\"thinking\":\"\",\"type\":\"thinking\"}");
  const size_t thinking = streamed.body.find("\"type\":\"thinking_delta\"");
  const size_t signature = streamed.body.find("{\"signature\":\"\",\"type\":\"signature_delta\"}");
  const size_t text = streamed.body.find("\"type\":\"text_delta\"");
  EXPECT_NE(start, std::string::npos) << streamed.body;
  EXPECT_LT(start, thinking);
  EXPECT_LT(thinking, signature);
  EXPECT_LT(signature, text);
  EXPECT_NE(text, std::string::npos) << streamed.body;
  // (The text goes out as it is sampled: its deltas join to the answer's.)
  std::string joined;
  for (size_t at = streamed.body.find("\"type\":\"text_delta\""); at != std::string::npos;
       at = streamed.body.find("\"type\":\"text_delta\"", at + 1)) {
    const size_t data = streamed.body.rfind("data: ", at);
    joined += json::parse(streamed.body.substr(data + 6,
                                               streamed.body.find("\n\n", data) - data - 6))["delta"]["text"]
                  .get<std::string>();
  }
  EXPECT_EQ(joined, "ack after thinking");
  EXPECT_EQ(json::parse(c.client.call("GET", "/v1/sessions/claude-thinks").body)["history_edits"], 0);
  body["thinking"] = {{"type", "sometimes"}};
  const auto bad = c.post(body);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(json::parse(bad.body)["error"]["message"].get<std::string>().find("thinking.type"), 0u)
      << bad.body;
}

TEST(GatewayAnthropic, MessagesWithToolUseAndToolResultStayInOneWindow) {
  Bench bench;
  Claude c(bench.port(), "claude");
  json messages = json::array(
      {{{"role", "user"},
        {"content", json::array({{{"type", "text"}, {"text", "marker=a1 please call the tool"}}})}}});
  json body = {{"model", "claude-test"},
               {"max_tokens", 100},
               {"system", "You are a test agent."},
               {"tools", kTools},
               {"messages", messages}};
  const auto counted = c.post(body, "/count_tokens");
  const auto first = c.post(body);
  ASSERT_EQ(first.status, 200) << first.body;
  const json answer = json::parse(first.body);
  EXPECT_EQ(answer["type"], "message");
  EXPECT_EQ(answer["stop_reason"], "tool_use");
  ASSERT_EQ(answer["content"].size(), 1u);
  EXPECT_EQ(answer["content"][0]["type"], "tool_use");
  EXPECT_EQ(answer["content"][0]["input"], json({{"cmd", "ls -la"}}));
  // The harness's copy of the answer plus a tool_result block and text.
  messages.push_back({{"role", "assistant"}, {"content", answer["content"]}});
  messages.push_back({{"role", "user"},
                      {"content", json::array({{{"type", "tool_result"},
                                                {"tool_use_id", answer["content"][0]["id"]},
                                                {"content", "a b c"}},
                                               {{"type", "text"}, {"text", "go on"}}})}});
  body["messages"] = messages;
  const auto second = c.post(body);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(json::parse(second.body)["content"][0]["text"], "ack a1 1");
  EXPECT_EQ(json::parse(second.body)["stop_reason"], "end_turn");
  EXPECT_EQ(json::parse(c.client.call("GET", "/v1/sessions/claude").body)["history_edits"], 0);
  const auto tokenizer = make_tokenizer("byte");
  const std::string prompt = tokenizer->decode(bench.upstream->calls()[1].prompt);
  EXPECT_NE(prompt.find("<tool_response>\na b c\n</tool_response>"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("<tools>"), std::string::npos);
  // count_tokens is the size of the prompt that was then sent.
  ASSERT_EQ(counted.status, 200) << counted.body;
  EXPECT_EQ(json::parse(counted.body)["input_tokens"].get<size_t>(),
            bench.upstream->calls()[0].prompt.size());
}

TEST(GatewayAnthropic, StreamingEventsAndApiKeySessions) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const json body = {
      {"max_tokens", 50}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "marker=k1 hi"}}}}};
  const auto reply = client.call("POST", "/v1/messages", body.dump(), "application/json", "",
                                 {{"x-api-key", "keyed-session"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.content_type, "text/event-stream");
  std::vector<std::string> events;
  std::string text;
  size_t at = 0;
  while ((at = reply.body.find("event: ", at)) != std::string::npos) {
    const size_t eol = reply.body.find('\n', at);
    events.push_back(reply.body.substr(at + 7, eol - at - 7));
    const size_t data = reply.body.find("data: ", eol);
    const json payload = json::parse(reply.body.substr(data + 6, reply.body.find("\n\n", data) - data - 6));
    EXPECT_EQ(payload["type"], events.back());
    if (events.back() == "content_block_delta") text += payload["delta"]["text"].get<std::string>();
    // (The text goes out as it is sampled: one delta event per piece, counted once here.)
    if (events.size() >= 2 && events.back() == "content_block_delta" &&
        events[events.size() - 2] == events.back())
      events.pop_back();
    at = data;
  }
  const std::vector<std::string> expected = {"message_start",       "content_block_start",
                                             "content_block_delta", "content_block_stop",
                                             "message_delta",       "message_stop"};
  EXPECT_EQ(events, expected);
  EXPECT_EQ(text, "ack k1 0");
  EXPECT_EQ(client.call("GET", "/v1/sessions/keyed-session").status, 200);
  const auto bearer =
      client.call("POST", "/v1/messages", json{{"max_tokens", 5}, {"messages", body["messages"]}}.dump(),
                  "application/json", "", {{"Authorization", "Bearer bearer-claude"}});
  EXPECT_EQ(bearer.status, 200) << bearer.body;
}

TEST(GatewayAnthropic, ErrorsAreAnthropicShaped) {
  Bench bench;
  Claude c(bench.port(), "bad");
  const auto check = [](const server::testing::Reply& reply, int status, const std::string& type) {
    EXPECT_EQ(reply.status, status) << reply.body;
    const json body = json::parse(reply.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << reply.body;
    EXPECT_EQ(body["type"], "error");
    EXPECT_EQ(body["error"]["type"], type);
  };
  check(c.post({{"messages", {{{"role", "user"}, {"content", "x"}}}}}), 400,
        "invalid_request_error");  // no max_tokens
  check(c.post({{"max_tokens", 5}, {"messages", {{{"role", "developer"}, {"content", "x"}}}}}), 400,
        "invalid_request_error");
  check(c.post({{"max_tokens", 5}, {"messages", {{{"role", "system"}, {"content", 7}}}}}), 400,
        "invalid_request_error");
  check(c.post({{"max_tokens", 5}, {"messages", {{{"role", "system"}, {"content", {{{"type", "image"}}}}}}}}),
        400, "invalid_request_error");
  check(c.post({{"max_tokens", 5}, {"messages", {{{"role", "user"}, {"content", {{{"type", "image"}}}}}}}}),
        400, "invalid_request_error");
  check(c.post({{"max_tokens", 5},
                {"stop_sequences", json::array({""})},  // an empty stop sequence
                {"messages", {{{"role", "user"}, {"content", "x"}}}}}),
        400, "invalid_request_error");
  check(c.client.call("POST", "/v1/messages", R"({"max_tokens": 5, "messages": []})"), 401,
        "authentication_error");
  EXPECT_EQ(bench.upstream->calls().size(), 0u);
}

// What Claude Code (2.1.x, as of late 2026) sends: a system prompt of text blocks led by its attribution
// line, whose cch hash differs on every call; user turns of several text blocks (a system-reminder, then
// the words); and mid-conversation system messages ({"role": "system"} inside messages) for its reminders.
// The attribution line never reaches the model and never makes a call an edited history; a system message
// stands where it was sent; text blocks are joined by "\n" (a system prompt's by ""), as vLLM's Messages
// API joins them. The session goes on as one window across all of it, and count_tokens counts the same.
// Claude Code's tool search (its ToolSearch tool; the tools it finds are in the list with
// `defer_loading: true`): a tool result of tool_reference blocks (with the text block Claude Code puts
// beside it) is a tool message whose text names the tools found, one "Tool loaded: NAME" line each; every
// tool of the list, the deferred ones included, is in the prompt (deferral is not emulated), so the model
// can call what it found; the session goes on as one window. A tool result's block of another kind is a
// 400 naming it.
TEST(GatewayAnthropic, ClaudeCodesToolSearchResultsNameTheToolsFound) {
  GatewayOptions options;
  options.budget = Budget{8192, 1024, 2, 256, 256, 8};  // (room for three tools' schemas)
  Bench bench(llm::ApiKind::kSglang, {}, options);
  Claude c(bench.port(), "tool-search");
  const json tools = json::array(
      {{{"name", "ToolSearch"},
        {"description", "Fetches deferred tools"},
        {"input_schema", {{"type", "object"}, {"properties", {{"query", {{"type", "string"}}}}}}}},
       {{"name", "TaskCreate"},
        {"description", "Create a task in the list"},
        {"input_schema", {{"type", "object"}}},
        {"defer_loading", true}},
       {{"name", "shell"}, {"description", "run a command"}, {"input_schema", {{"type", "object"}}}}});
  json messages = json::array({{{"role", "user"}, {"content", "marker=ts please call the tool"}}});
  const auto body = [&] {
    return json{{"model", "claude-test"}, {"max_tokens", 200}, {"messages", messages}, {"tools", tools}};
  };
  const auto first = c.post(body());
  ASSERT_EQ(first.status, 200) << first.body;
  const json content = json::parse(first.body)["content"];
  ASSERT_EQ(content.back()["type"], "tool_use") << content;
  EXPECT_NE(
      make_tokenizer("byte")->decode(bench.upstream->calls().back().prompt).find("Create a task in the list"),
      std::string::npos)
      << "a deferred tool is in the prompt";
  messages.push_back({{"role", "assistant"}, {"content", content}});
  json found = json::array({{{"type", "tool_reference"}, {"tool_name", "TaskCreate"}},
                            {{"type", "tool_reference"}, {"tool_name", "TaskUpdate"}}});
  messages.push_back(
      {{"role", "user"},
       {"content",
        json::array({{{"type", "tool_result"}, {"tool_use_id", content.back()["id"]}, {"content", found}},
                     {{"type", "text"}, {"text", "Tool loaded."}}})}});
  const auto second = c.post(body());
  ASSERT_EQ(second.status, 200) << second.body;
  const std::string prompt = make_tokenizer("byte")->decode(bench.upstream->calls().back().prompt);
  EXPECT_NE(prompt.find("Tool loaded: TaskCreate\nTool loaded: TaskUpdate"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("Tool loaded."), std::string::npos) << prompt;
  EXPECT_EQ(json::parse(c.client.call("GET", "/v1/sessions/tool-search").body)["history_edits"], 0);
  // Another kind of block in a tool result: refused, naming it (the session keeps its window).
  messages.back()["content"][0]["content"] =
      json::array({{{"type", "image"}, {"source", {{"type", "base64"}, {"data", "AAAA"}}}}});
  const auto refused = c.post(body());
  EXPECT_EQ(refused.status, 400) << refused.body;
  const std::string why = json::parse(refused.body)["error"]["message"];
  EXPECT_NE(why.find("tool_reference"), std::string::npos) << why;
  EXPECT_NE(why.find("\"image\""), std::string::npos) << why;
  EXPECT_EQ(why.rfind("messages[2].content[0].content[0] must be", 0), 0u) << why;
}

TEST(GatewayAnthropic, ClaudeCodesSystemBlocksRemindersAndSystemMessages) {
  Bench bench;
  Claude c(bench.port(), "claude-code");
  const auto system = [](int call) {
    return json::array(
        {{{"type", "text"},
          {"text", "x-anthropic-billing-header: cc_version=2.1.200.a1b; cc_entrypoint=cli; cch=" +
                       std::to_string(7919 * (call + 1)) + ";"}},
         {{"type", "text"},
          {"text", "You are Claude Code, Anthropic's official CLI for Claude."},
          {"cache_control", {{"type", "ephemeral"}}}},
         {{"type", "text"}, {"text", "\nYou are an interactive agent."}}});
  };
  json messages = json::array(
      {{{"role", "user"},
        {"content", json::array({{{"type", "text"}, {"text", "<system-reminder>ctx</system-reminder>"}},
                                 {{"type", "text"}, {"text", ""}},
                                 {{"type", "text"}, {"text", "marker=cc please call the tool"}}})}}});
  const auto body = [&](int call) {
    return json{{"model", "claude-test"}, {"max_tokens", 200}, {"system", system(call)},
                {"messages", messages},   {"tools", kTools},   {"metadata", {{"user_id", "u"}}},
                {"stream", call % 2 == 1}};
  };
  const auto prompt_text = [&] {
    return make_tokenizer("byte")->decode(bench.upstream->calls().back().prompt);
  };
  const auto answer = [&](const server::testing::Reply& reply) {
    EXPECT_EQ(reply.status, 200) << reply.body;
    if (reply.body.starts_with("event:")) {  // a stream: the blocks its events build
      json blocks = json::array();
      std::string input;
      for (size_t at = 0; (at = reply.body.find("data: ", at)) != std::string::npos;) {
        const size_t end = reply.body.find("\n\n", at);
        const json event = json::parse(reply.body.substr(at + 6, end - at - 6));
        at = end;
        if (event["type"] == "content_block_start") blocks.push_back(event["content_block"]);
        if (event["type"] == "content_block_delta" && event["delta"]["type"] == "text_delta")
          blocks.back()["text"] =
              blocks.back()["text"].get<std::string>() + event["delta"]["text"].get<std::string>();
        if (event["type"] == "content_block_delta" && event["delta"]["type"] == "input_json_delta")
          input += event["delta"]["partial_json"].get<std::string>();
        if (event["type"] == "content_block_stop" && blocks.back()["type"] == "tool_use")
          blocks.back()["input"] = json::parse(input.empty() ? "{}" : input);
      }
      return blocks;
    }
    return json::parse(reply.body)["content"];
  };

  json content = answer(c.post(body(0)));
  const std::string first = prompt_text();
  EXPECT_EQ(first.find("x-anthropic-billing-header"), std::string::npos) << first;
  EXPECT_NE(
      first.find("<|im_start|>system\nYou are Claude Code, Anthropic's official CLI for Claude.\nYou are "
                 "an interactive agent."),
      std::string::npos)
      << first;
  EXPECT_NE(first.find("<system-reminder>ctx</system-reminder>\nmarker=cc please call the tool<|im_end|>"),
            std::string::npos)
      << first;
  // count_tokens counts the prompt that was sent (the attribution line left out there too).
  const auto counted = c.post(body(5), "/count_tokens");
  ASSERT_EQ(counted.status, 200) << counted.body;
  EXPECT_EQ(json::parse(counted.body)["input_tokens"], bench.upstream->calls().back().prompt.size());

  for (int call = 1; call <= 6; ++call) {
    messages.push_back({{"role", "assistant"}, {"content", content}});
    json results = json::array();
    for (const json& block : content) {
      if (block["type"] == "tool_use")
        results.push_back({{"type", "tool_result"},
                           {"tool_use_id", block["id"]},
                           {"content", "out " + std::to_string(call)}});
    }
    if (results.empty()) results.push_back({{"type", "text"}, {"text", "next " + std::to_string(call)}});
    messages.push_back({{"role", "user"}, {"content", results}});
    // Every other call, a reminder as a mid-conversation system message after the user turn.
    const std::string reminder =
        "<system-reminder>file " + std::to_string(call) + " changed</system-reminder>";
    if (call % 2 == 0) {
      messages.push_back(
          {{"role", "system"}, {"content", json::array({{{"type", "text"}, {"text", reminder}}})}});
    }
    content = answer(c.post(body(call)));
    const std::string prompt = prompt_text();
    EXPECT_EQ(prompt.find("x-anthropic-billing-header"), std::string::npos) << call;
    if (call % 2 == 0) {
      EXPECT_NE(prompt.find("<|im_start|>system\n" + reminder + "<|im_end|>\n<|im_start|>assistant\n"),
                std::string::npos)
          << "the reminder stands where it was sent, just before the answer: " << prompt;
    }
  }
  const json state = json::parse(c.client.call("GET", "/v1/sessions/claude-code").body);
  EXPECT_EQ(state["history_edits"], 0) << "a new cch each call, and the reminders, edit nothing: " << state;
  size_t turns = 0;
  for (const crl::testing::LoggedCall& call : bench.upstream->calls())
    turns += call.rid.find("/summarize/") == std::string::npos;
  EXPECT_EQ(turns, 7u) << "one sampled answer per call (and the summaries of its compactions)";
}

}  // namespace
}  // namespace crl::server::gateway::testing
