// The OpenAI Responses API on the gateway's sessions (server/gateway/responses_codec.h): input items and
// instructions, function_call / function_call_output round trips recognised as the session's own answers,
// named and numbered stream events, incomplete answers, the Bearer path, input_tokens, and the refusals.
#include <map>
#include <span>
#include <tuple>

#include "engine/tokenizer.h"
#include "tests/server/gateway/gateway_fixture.h"
#include "tests/server/wait_helpers.h"

namespace crl::server::gateway::testing {
namespace {

const json kResponsesTools = json::array({{{"type", "function"},
                                           {"name", "shell"},
                                           {"description", "run a command"},
                                           {"parameters", {{"type", "object"}}},
                                           {"strict", false}}});

// A Responses harness (Codex-style, store: false): the whole input every call, each answer's output items
// appended to it as the harness's copy.
struct ResponsesHarness : SessionClient {
  ResponsesHarness(uint16_t port, std::string id, std::string marker = "r0")
      : SessionClient(port, std::move(id)) {
    input = json::array({user("marker=" + marker + " do the task")});
  }
  static json user(const std::string& text) {
    return {{"type", "message"},
            {"role", "user"},
            {"content", json::array({{{"type", "input_text"}, {"text", text}}})}};
  }
  std::string path() const { return "/v1/sessions/" + id + "/v1/responses"; }
  server::testing::Reply post(const json& body) { return client.call("POST", path(), body.dump()); }
  json body(json extra = json::object()) const {
    json out = {{"model", "test"},         {"instructions", "You are a test agent."},
                {"input", input},          {"tools", kResponsesTools},
                {"store", false},          {"parallel_tool_calls", true},
                {"include", json::array()}};
    for (auto& [k, v] : extra.items()) out[k] = v;
    return out;
  }
  // One call; on success its output items are appended to the input.
  json turn(json extra = json::object()) {
    last = post(body(std::move(extra)));
    EXPECT_EQ(last.status, 200) << last.body;
    if (last.status != 200) return json();
    json answer = json::parse(last.body);
    for (const json& item : answer["output"]) input.push_back(item);
    return answer;
  }
  // A function_call_output for every function_call of `answer`.
  void outputs(const json& answer, const std::string& output) {
    for (const json& item : answer["output"]) {
      if (item["type"] == "function_call")
        input.push_back({{"type", "function_call_output"}, {"call_id", item["call_id"]}, {"output", output}});
    }
  }
  json input;
};

// The text of an answer's message item ("" when it has none).
std::string response_text(const json& answer) {
  for (const json& item : answer["output"]) {
    if (item["type"] == "message") return item["content"][0]["text"].get<std::string>();
  }
  return "";
}

TEST(GatewayResponses, FunctionCallsAndTheirOutputsStayInOneWindow) {
  Bench bench;
  ResponsesHarness h(bench.port(), "codex");
  h.input = json::array({ResponsesHarness::user("marker=x1 please call the tool")});
  const json first = h.turn();
  EXPECT_EQ(first["object"], "response");
  EXPECT_EQ(first["status"], "completed");
  EXPECT_EQ(first["incomplete_details"], nullptr);
  EXPECT_EQ(first["model"], "test");
  EXPECT_EQ(first["id"].get<std::string>().rfind("resp_", 0), 0u);
  ASSERT_EQ(first["output"].size(), 1u);
  const json& call = first["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "shell");
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>()), json({{"cmd", "ls -la"}}));
  EXPECT_EQ(call["status"], "completed");
  EXPECT_FALSE(call["call_id"].get<std::string>().empty());
  EXPECT_EQ(first["usage"]["input_tokens"].get<size_t>(), bench.upstream->calls()[0].prompt.size());
  EXPECT_EQ(first["usage"]["output_tokens"].get<size_t>(), bench.upstream->calls()[0].output.size());
  EXPECT_EQ(first["usage"]["total_tokens"],
            first["usage"]["input_tokens"].get<int>() + first["usage"]["output_tokens"].get<int>());
  // Reasoning items a harness carries along are skipped; the output and the user's next words follow.
  h.input.push_back({{"type", "reasoning"}, {"id", "rs_1"}, {"summary", json::array()}});
  h.outputs(first, "a b c");
  h.input.push_back(ResponsesHarness::user("go on"));
  const json second = h.turn();
  EXPECT_EQ(response_text(second), "ack x1 1");
  EXPECT_EQ(h.state()["history_edits"], 0) << "the function_call item is the session's own answer";
  const std::string prompt = make_tokenizer("byte")->decode(bench.upstream->calls()[1].prompt);
  EXPECT_EQ(prompt.rfind("<|im_start|>system\nYou are a test agent.", 0), 0u) << prompt;
  EXPECT_NE(prompt.find("<tools>"), std::string::npos);
  EXPECT_NE(prompt.find("<tool_response>\na b c\n</tool_response>"), std::string::npos) << prompt;
  // The forwarded prompt of the second call continues the first's window (prompt + what was sampled).
  const auto& calls = bench.upstream->calls();
  std::vector<TokenId> window = calls[0].prompt;
  window.insert(window.end(), calls[0].output.begin(), calls[0].output.end());
  EXPECT_TRUE(std::equal(window.begin(), window.end(), calls[1].prompt.begin()));
}

// A message item and a function_call item are one assistant turn: the harness's copy of both is recognised.
TEST(GatewayResponses, AnAnswerWithTextAndACallIsOneAssistantTurn) {
  Bench bench;
  ResponsesHarness h(bench.port(), "text-and-call");
  h.input = json::array({ResponsesHarness::user("marker=t1 TEXTANDTOOL")});
  const json first = h.turn();
  ASSERT_EQ(first["output"].size(), 2u) << first.dump();
  EXPECT_EQ(first["output"][0]["type"], "message");
  EXPECT_EQ(response_text(first), "Let me look.");
  EXPECT_EQ(first["output"][1]["type"], "function_call");
  h.outputs(first, "file.txt");
  h.turn();
  EXPECT_EQ(h.state()["history_edits"], 0);
  const auto& calls = bench.upstream->calls();
  ASSERT_EQ(calls.size(), 2u);
  std::vector<TokenId> window = calls[0].prompt;
  window.insert(window.end(), calls[0].output.begin(), calls[0].output.end());
  EXPECT_TRUE(std::equal(window.begin(), window.end(), calls[1].prompt.begin()))
      << "the second call continues the first's window";
}

TEST(GatewayResponses, ManyTurnsWithSeveralCompactionsExportTokenExact) {
  Bench bench;
  ResponsesHarness h(bench.port(), "long-responses");
  for (int t = 0; t < 60; ++t) {
    const json answer = h.turn();
    if (t % 7 == 4) h.outputs(answer, "listing " + std::to_string(t));
    h.input.push_back(ResponsesHarness::user("step " + std::to_string(t) + " output: ok"));
    if (t % 7 == 3) h.input.push_back(ResponsesHarness::user("marker=z please call the tool"));
  }
  const json state = h.state();
  EXPECT_GE(state["compactions"].get<int>(), 3);
  EXPECT_EQ(state["history_edits"], 0);
  ASSERT_EQ(h.reward(1).status, 200);
  const json exported = h.export_json();
  EXPECT_EQ(check_exact(exported, bench.upstream->calls()), bench.upstream->calls().size());
  check_masks(exported);
}

// Each event's name, its payload, and its payload's text (for the byte check).
struct ResponseEvent {
  std::string name, text;
  json payload;
};

std::vector<ResponseEvent> response_events(const std::string& body) {
  std::vector<ResponseEvent> out;
  size_t at = 0;
  while (at < body.size()) {
    EXPECT_EQ(body.compare(at, 7, "event: "), 0) << body.substr(at, 80);
    const size_t eol = body.find('\n', at);
    EXPECT_EQ(body.compare(eol + 1, 6, "data: "), 0);
    const size_t end = body.find("\n\n", eol);
    if (eol == std::string::npos || end == std::string::npos) break;
    ResponseEvent event{body.substr(at + 7, eol - at - 7), body.substr(eol + 7, end - eol - 7), json()};
    event.payload = json::parse(event.text);
    out.push_back(std::move(event));
    at = end + 2;
  }
  return out;
}

// The events with each run of one delta event (a text sent as it was sampled, in pieces) merged into one,
// its deltas joined: the stream as a whole answer sends it.
std::vector<ResponseEvent> merge_deltas(const std::vector<ResponseEvent>& events) {
  std::vector<ResponseEvent> out;
  for (const ResponseEvent& event : events) {
    if (!out.empty() && event.name.ends_with(".delta") && out.back().name == event.name) {
      out.back().payload["delta"] =
          out.back().payload["delta"].get<std::string>() + event.payload["delta"].get<std::string>();
      continue;
    }
    out.push_back(event);
  }
  return out;
}

TEST(GatewayResponses, StreamingEventsAreNamedNumberedAndEndWithTheResponse) {
  Bench bench;
  ResponsesHarness h(bench.port(), "stream");
  const auto streamed = h.post(h.body({{"stream", true}}));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_EQ(streamed.content_type, "text/event-stream");
  EXPECT_EQ(streamed.body.find("[DONE]"), std::string::npos);
  const std::vector<ResponseEvent> sent = response_events(streamed.body);
  std::string text;
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].payload["type"], sent[i].name);
    EXPECT_EQ(sent[i].payload["sequence_number"], i);
    EXPECT_EQ(sent[i].payload.dump(), sent[i].text) << "keys sorted, as the other answers";
    if (sent[i].name == "response.output_text.delta") text += sent[i].payload["delta"].get<std::string>();
  }
  const std::vector<ResponseEvent> events = merge_deltas(sent);
  std::vector<std::string> names;
  for (const ResponseEvent& event : events) names.push_back(event.name);
  const std::vector<std::string> expected = {"response.created",           "response.in_progress",
                                             "response.output_item.added", "response.content_part.added",
                                             "response.output_text.delta", "response.output_text.done",
                                             "response.content_part.done", "response.output_item.done",
                                             "response.completed"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(text, "ack r0 0");
  ASSERT_EQ(events.size(), expected.size());
  EXPECT_EQ(events[0].payload["response"]["status"], "in_progress");
  EXPECT_EQ(events[0].payload["response"]["output"], json::array());
  EXPECT_EQ(events[5].payload["text"], "ack r0 0");
  const std::string item_id = events[2].payload["item"]["id"];
  EXPECT_EQ(events[4].payload["item_id"], item_id);
  EXPECT_EQ(events[7].payload["item"]["content"][0]["text"], "ack r0 0");
  // A retry of the same input answers the stored response: the stream's last event, as one object.
  const auto retried = h.post(h.body());
  ASSERT_EQ(retried.status, 200);
  EXPECT_EQ(json::parse(retried.body), events.back().payload["response"]);
  EXPECT_EQ(json::parse(retried.body).dump(), retried.body) << "keys sorted, as the other answers";
  EXPECT_EQ(bench.upstream->calls().size(), 1u) << "a retry samples nothing";
}

// A thinking model's reasoning (--reasoning-parser) is a reasoning item before the others (one
// reasoning_text part, as vLLM answers it); streamed as its reasoning_text delta and done events. The
// harness's copy, reasoning item included, continues the window.
TEST(GatewayResponses, ReasoningIsAReasoningItem) {
  GatewayOptions options;
  options.reasoning_parser = "think";
  Bench bench(llm::ApiKind::kSglang, {}, options);
  ResponsesHarness h(bench.port(), "reasoner");
  h.input = json::array({ResponsesHarness::user("marker=r5 THINKCALL")});
  const json answer = h.turn();
  ASSERT_EQ(answer["output"].size(), 2u) << answer;
  const json& reasoning = answer["output"][0];
  EXPECT_EQ(reasoning["type"], "reasoning");
  EXPECT_EQ(reasoning["content"], json::array({{{"type", "reasoning_text"}, {"text", "list them"}}}));
  EXPECT_EQ(reasoning["summary"], json::array());
  EXPECT_EQ(reasoning["id"].get<std::string>().rfind("rs_", 0), 0u);
  EXPECT_EQ(answer["output"][1]["type"], "function_call");
  h.outputs(answer, "a b");
  h.turn();
  h.input.push_back(ResponsesHarness::user("THINKFIRST"));
  const auto streamed = h.post(h.body({{"stream", true}}));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::vector<ResponseEvent> sent = response_events(streamed.body);
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].payload["sequence_number"], i);
    EXPECT_EQ(sent[i].payload.dump(), sent[i].text) << "keys sorted, as the other answers";
  }
  const std::vector<ResponseEvent> events = merge_deltas(sent);
  std::vector<std::string> names;
  for (const ResponseEvent& event : events) names.push_back(event.name);
  const std::vector<std::string> expected = {"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.completed"};
  ASSERT_EQ(names, expected);
  const std::string thought =
      "Maybe <tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"rm\"}}\n</tool_call> no.";
  EXPECT_EQ(events[3].payload["delta"], thought);
  EXPECT_EQ(events[4].payload["text"], thought);
  EXPECT_EQ(events[3].payload["item_id"], events[2].payload["item"]["id"]);
  EXPECT_EQ(events[2].payload["item"]["content"], json::array());
  EXPECT_EQ(events[5].payload["item"]["content"][0]["text"], thought);
  EXPECT_EQ(events[8].payload["output_index"], 1);
  const json final_response = events.back().payload["response"];
  EXPECT_EQ(final_response["output"][0]["type"], "reasoning");
  for (const json& item : final_response["output"]) h.input.push_back(item);
  h.input.push_back(ResponsesHarness::user("next"));
  h.turn();
  EXPECT_EQ(h.state()["history_edits"], 0);
}

TEST(GatewayResponses, AStreamedFunctionCallCarriesItsArguments) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const json body = {{"model", "test"},
                     {"input", "marker=s2 please call the tool"},
                     {"tools", kResponsesTools},
                     {"stream", true}};
  const auto reply = client.call("POST", "/v1/responses", body.dump(), "application/json", "",
                                 {{"Authorization", "Bearer bearer-responses"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const std::vector<ResponseEvent> events = response_events(reply.body);
  std::vector<std::string> names;
  for (const ResponseEvent& e : events) names.push_back(e.name);
  const std::vector<std::string> expected = {"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done",
                                             "response.completed"};
  ASSERT_EQ(names, expected);
  EXPECT_EQ(events[2].payload["item"]["arguments"], "");
  EXPECT_EQ(events[2].payload["item"]["status"], "in_progress");
  EXPECT_EQ(json::parse(events[4].payload["arguments"].get<std::string>()), json({{"cmd", "ls -la"}}));
  EXPECT_EQ(events[3].payload["delta"], events[4].payload["arguments"]);
  EXPECT_EQ(events[5].payload["item"], events[6].payload["response"]["output"][0]);
  EXPECT_EQ(client.call("GET", "/v1/sessions/bearer-responses").status, 200);
}

TEST(GatewayResponses, AnAnswerOutOfTokensIsIncomplete) {
  Bench bench;
  ResponsesHarness h(bench.port(), "short");
  const json answer = h.turn({{"max_output_tokens", 3}});
  EXPECT_EQ(answer["status"], "incomplete");
  EXPECT_EQ(answer["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(response_text(answer), "ack");
  const auto streamed = h.post(h.body({{"max_output_tokens", 3}, {"stream", true}}));
  EXPECT_EQ(response_events(streamed.body).back().name, "response.incomplete");
}

TEST(GatewayResponses, ToolChoiceNoneAndJsonSchemaReachTheCall) {
  Bench bench;
  ResponsesHarness h(bench.port(), "choice");
  h.input = json::array({ResponsesHarness::user("marker=c1 please call the tool")});
  const json schema = {{"type", "object"}, {"properties", {{"cmd", {{"type", "string"}}}}}};
  const json answer =
      h.turn({{"tool_choice", "none"},
              {"text", {{"format", {{"type", "json_schema"}, {"name", "cmd"}, {"schema", schema}}}}}});
  ASSERT_EQ(answer["output"].size(), 1u);
  EXPECT_EQ(answer["output"][0]["type"], "message");
  EXPECT_NE(response_text(answer).find("<tool_call>"), std::string::npos);
  EXPECT_EQ(json::parse(bench.upstream->calls()[0].json_schema), schema);
}

// Every refusal is an OpenAI-shaped 400 naming the field, and nothing reaches the upstream.
TEST(GatewayResponses, BadInputIsRefusedNamingTheField) {
  Bench bench;
  ResponsesHarness h(bench.port(), "bad");
  const auto check = [&](json body, const std::string& param) {
    const auto reply = h.post(body);
    EXPECT_EQ(reply.status, 400) << body.dump();
    const json error = json::parse(reply.body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << reply.body;
    EXPECT_EQ(error["error"]["type"], "invalid_request_error") << reply.body;
    EXPECT_EQ(error["error"]["param"], param) << reply.body;
  };
  json input = h.input;
  const auto with = [&](const json& item) {
    json list = input;
    list.push_back(item);
    return h.body({{"input", list}});
  };
  check(with({{"type", "item_reference"}, {"id", "msg_1"}}), "input[1].type");
  check(with({{"type", "web_search_call"}, {"id", "ws_1"}}), "input[1].type");
  check(with({{"role", "user"}, {"content", json::array({{{"type", "input_image"}, {"image_url", "x"}}})}}),
        "input[1].content[0]");
  check(with({{"role", "robot"}, {"content", "x"}}), "input[1].role");
  check(with({{"type", "function_call"}, {"call_id", "c"}, {"arguments", "{}"}}), "input[1].name");
  check(with({{"type", "function_call_output"}, {"call_id", "c"}}), "input[1].output");
  check(with(json::array({1})), "input[1]");
  check(h.body({{"input", 5}}), "input");
  check(h.body({{"input", json::array()}}), "input");
  check(h.body({{"previous_response_id", "resp_1"}}), "previous_response_id");  // (this session has none)
  check(h.body({{"conversation", "conv_1"}}), "conversation");
  check(h.body({{"background", true}}), "background");
  check(h.body({{"tools", json::array({{{"type", "web_search"}}})}}), "tools[0].type");
  check(h.body({{"tools", json::array({{{"type", "function"}}})}}), "tools[0].name");
  check(h.body({{"max_output_tokens", 0}}), "max_output_tokens");
  check(h.body({{"instructions", json::array()}}), "instructions");
  check(h.body({{"tool_choice", "sometimes"}}), "tool_choice");
  check(h.body({{"text", {{"format", {{"type", "json_schema"}}}}}}), "text.format.schema");
  check(h.body({{"stream", "yes"}}), "stream");
  EXPECT_EQ(bench.upstream->calls().size(), 0u);
  // A harness without a session: 401, OpenAI-shaped; GET of a stored response is not an endpoint.
  const auto anonymous = h.client.call("POST", "/v1/responses", h.body().dump());
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_EQ(json::parse(anonymous.body)["error"]["code"], "missing_session");
  EXPECT_EQ(h.client.call("GET", "/v1/responses/resp_1").status, 404);
  // The session is alive and answers.
  h.turn();
  EXPECT_EQ(h.last.status, 200);
}

// A harness that chains its calls (previous_response_id, as Codex CLI and the OpenAI Agents SDK can): each
// call sends only the items it adds since the last answer and names the response it follows.
struct ChainedHarness : ResponsesHarness {
  using ResponsesHarness::ResponsesHarness;
  json chained_body(json extra = json::object()) const {
    json out = body(std::move(extra));
    out["input"] = input;
    if (!previous.empty() && !out.contains("previous_response_id")) out["previous_response_id"] = previous;
    return out;
  }
  // One call; on success the next one follows its answer, with nothing added yet.
  json turn(json extra = json::object()) {
    last = post(chained_body(std::move(extra)));
    EXPECT_EQ(last.status, 200) << last.body;
    if (last.status != 200) return json();
    json answer = json::parse(last.body);
    previous = answer["id"].get<std::string>();
    input = json::array();
    return answer;
  }
  std::string previous;
};

// The prompts the upstream saw for one session, in order.
std::vector<std::vector<TokenId>> session_prompts(const Bench& bench, const std::string& id) {
  std::vector<std::vector<TokenId>> out;
  for (const auto& call : bench.upstream->calls())
    if (call.rid.rfind(id + "/", 0) == 0) out.push_back(call.prompt);
  return out;
}

// Whether an error answer is previous_response_not_found, as the API answers it.
void expect_previous_not_found(const server::testing::Reply& reply) {
  EXPECT_EQ(reply.status, 400) << reply.body;
  const json error = json::parse(reply.body, nullptr, false);
  ASSERT_TRUE(error.is_object()) << reply.body;
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_EQ(error["error"]["code"], "previous_response_not_found");
  EXPECT_EQ(error["error"]["param"], "previous_response_id");
  EXPECT_EQ(error["error"]["message"].get<std::string>().rfind("Previous response with id '", 0), 0u)
      << reply.body;
}

// The same conversation, once with the whole input every call and once chained: the upstream sees the same
// prompts, the session records no history edit, and the chained session's export is token-exact across
// compactions.
TEST(GatewayResponses, AChainedHarnessGetsThePromptsOfAStatelessOne) {
  Bench bench;
  ResponsesHarness whole(bench.port(), "whole", "c1");
  ChainedHarness chained(bench.port(), "chained", "c1");
  for (int t = 0; t < 40; ++t) {
    const json a = whole.turn();
    const json b = chained.turn();
    ASSERT_EQ(response_text(a), response_text(b)) << t;
    ASSERT_EQ(a["output"].size(), b["output"].size()) << t;
    if (t % 5 == 2) {
      whole.outputs(a, "listing " + std::to_string(t));
      chained.outputs(b, "listing " + std::to_string(t));
    }
    for (ResponsesHarness* h :
         {static_cast<ResponsesHarness*>(&whole), static_cast<ResponsesHarness*>(&chained)}) {
      h->input.push_back(ResponsesHarness::user("step " + std::to_string(t) + " output: ok"));
      if (t % 5 == 1) h->input.push_back(ResponsesHarness::user("marker=z please call the tool"));
    }
  }
  const auto whole_prompts = session_prompts(bench, "whole");
  const auto chained_prompts = session_prompts(bench, "chained");
  ASSERT_EQ(whole_prompts.size(), chained_prompts.size());
  for (size_t i = 0; i < whole_prompts.size(); ++i) EXPECT_EQ(whole_prompts[i], chained_prompts[i]) << i;
  const json state = chained.state();
  EXPECT_GE(state["compactions"].get<int>(), 2);
  EXPECT_EQ(state["history_edits"], 0);
  ASSERT_EQ(chained.reward(1).status, 200);
  const json exported = chained.export_json();
  std::vector<crl::testing::LoggedCall> own;
  for (const auto& call : bench.upstream->calls())
    if (call.rid.rfind("chained/", 0) == 0) own.push_back(call);
  EXPECT_EQ(check_exact(exported, own), own.size());
  check_masks(exported);
  // After the reward nothing is kept: a chained call is refused, as any call is, for the ended session.
  chained.input.push_back(ResponsesHarness::user("more"));
  const auto after = chained.post(chained.chained_body());
  EXPECT_EQ(after.status, 409) << after.body;
  EXPECT_EQ(json::parse(after.body)["error"]["code"], "session_ended") << after.body;
}

// Two chained conversations of one session (a harness's sub-agents) call at once, and a retry of one call
// comes while its first try is in flight: the conversations reach the upstream together, the retry waits
// for its conversation's line to come back and gets the stored answer (nothing sampled twice), and both
// chains go on from their newest responses.
TEST(GatewayResponses, ChainedConversationsCallTogetherAndARetryWaitsForItsLine) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 0.8;
  Bench bench(llm::ApiKind::kSglang, faults);
  ChainedHarness a(bench.port(), "together", "ra");
  ChainedHarness b(bench.port(), "together", "rb");
  a.turn();
  b.turn();
  a.input.push_back(ResponsesHarness::user("step 1"));
  b.input.push_back(ResponsesHarness::user("step 1"));
  const json retried = a.chained_body();
  json first_try;
  std::thread a_call([&] { first_try = a.turn(); });
  std::thread b_call([&] { b.turn(); });
  EXPECT_TRUE(server::testing::eventually([&] { return bench.upstream->attempts() >= 4; }));
  ChainedHarness retrier(bench.port(), "together");  // (its own connection: a's is in use)
  const auto retry = retrier.post(retried);
  a_call.join();
  b_call.join();
  EXPECT_GE(bench.upstream->peak_in_flight(), 2u) << "the conversations' calls waited for each other";
  ASSERT_EQ(retry.status, 200) << retry.body;
  const json again = json::parse(retry.body);
  EXPECT_EQ(again["id"], first_try["id"]);
  EXPECT_EQ(response_text(again), response_text(first_try));
  EXPECT_EQ(response_text(first_try), "ack ra 1");
  EXPECT_EQ(bench.upstream->calls().size(), 4u) << "sampled twice";
  for (ChainedHarness* h : {&a, &b}) {
    h->input.push_back(ResponsesHarness::user("step 2"));
    EXPECT_EQ(response_text(h->turn()), std::string("ack ") + (h == &a ? "ra" : "rb") + " 2");
  }
  const json state = a.state();
  EXPECT_EQ(state["threads"], 2) << state;
  EXPECT_EQ(state["history_edits"], 0) << state;
}

// A chained call's instructions are its own (the API does not carry a response's instructions on): the
// same instructions continue the window, and streamed answers chain as well.
TEST(GatewayResponses, AChainedCallBringsItsOwnInstructionsAndStreamsChain) {
  Bench bench;
  ChainedHarness h(bench.port(), "chain-instructions");
  h.turn();
  h.input.push_back(ResponsesHarness::user("go on"));
  const auto streamed = h.post(h.chained_body({{"stream", true}}));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const auto events = response_events(streamed.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().name, "response.completed");
  h.previous = events.back().payload["response"]["id"].get<std::string>();
  h.input = json::array({ResponsesHarness::user("and again")});
  h.turn();
  EXPECT_EQ(h.state()["history_edits"], 0);
  const auto prompts = session_prompts(bench, "chain-instructions");
  ASSERT_EQ(prompts.size(), 3u);
  const auto tokenizer = make_tokenizer("byte");
  const std::string last = tokenizer->decode(prompts[2]);
  EXPECT_EQ(last.rfind("<|im_start|>system\nYou are a test agent.", 0), 0u) << last;
  EXPECT_NE(last.find("go on"), std::string::npos) << last;
  EXPECT_NE(last.find("and again"), std::string::npos) << last;
  // Other instructions on a chained call: the conversation's system message changed, another conversation
  // (a new thread of the session, gateway_session.h), the conversation's messages carried on.
  h.input = json::array({ResponsesHarness::user("one more")});
  h.turn({{"instructions", "You are another agent."}});
  EXPECT_EQ(h.state()["history_edits"], 0);
  EXPECT_EQ(h.state()["threads"], 2);
  const std::string other = tokenizer->decode(session_prompts(bench, "chain-instructions").back());
  EXPECT_EQ(other.rfind("<|im_start|>system\nYou are another agent.", 0), 0u) << other;
  EXPECT_NE(other.find("and again"), std::string::npos) << "the conversation came along";
}

TEST(GatewayResponses, UnknownPreviousResponsesAreRefusedAndNothingIsLost) {
  Bench bench;
  // A session that does not exist yet is not created by a call that continues nothing.
  ChainedHarness fresh(bench.port(), "chain-fresh");
  fresh.previous = "resp_nowhere";
  expect_previous_not_found(fresh.post(fresh.chained_body()));
  EXPECT_EQ(fresh.client.call("GET", "/v1/sessions/chain-fresh").status, 404);
  // On a live session: another session's response, an unknown one, and bad ids.
  ChainedHarness other(bench.port(), "chain-other");
  other.turn();
  ChainedHarness h(bench.port(), "chain-live");
  const json first = h.turn();
  h.input.push_back(ResponsesHarness::user("next"));
  expect_previous_not_found(h.post(h.chained_body({{"previous_response_id", other.previous}})));
  expect_previous_not_found(h.post(h.chained_body({{"previous_response_id", "resp_unknown"}})));
  for (const json& bad : {json(5), json(""), json::array()}) {
    const auto reply = h.post(h.chained_body({{"previous_response_id", bad}}));
    EXPECT_EQ(reply.status, 400) << reply.body;
    EXPECT_EQ(json::parse(reply.body)["error"]["param"], "previous_response_id") << reply.body;
  }
  EXPECT_EQ(session_prompts(bench, "chain-live").size(), 1u) << "nothing was sampled for the refused calls";
  // The session goes on from its response.
  const json second = h.turn();
  EXPECT_EQ(h.last.status, 200);
  EXPECT_EQ(h.state()["history_edits"], 0);
  EXPECT_NE(second["id"], first["id"]);
}

// A chained call sent again (the harness retried) gets the same answer, sampled once; a call that failed
// upstream can be sent again; continuing an earlier response is an edited history, and the responses after
// it are gone.
TEST(GatewayResponses, ChainedRetriesFailuresAndEarlierResponses) {
  crl::testing::FaultOptions faults;
  faults.transient_5xx = 1;  // every distinct request body: one 503 first
  GatewayOptions options;
  options.upstream.max_retries = 0;
  Bench bench(llm::ApiKind::kSglang, faults, options);
  ChainedHarness h(bench.port(), "chain-retry");
  const json first_body = h.chained_body();
  EXPECT_EQ(h.post(first_body).status, 502);
  const json first = h.turn();
  const std::string first_id = h.previous;
  h.input.push_back(ResponsesHarness::user("second"));
  const json body = h.chained_body();
  EXPECT_EQ(h.post(body).status, 502) << "the upstream failed once";
  const auto second = h.post(body);
  ASSERT_EQ(second.status, 200) << second.body;
  const size_t sampled = session_prompts(bench, "chain-retry").size();
  const auto again = h.post(body);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body)["id"], json::parse(second.body)["id"]);
  EXPECT_EQ(json::parse(again.body)["output"], json::parse(second.body)["output"]);
  EXPECT_EQ(session_prompts(bench, "chain-retry").size(), sampled) << "the retry was not sampled again";
  EXPECT_EQ(h.state()["history_edits"], 0);
  const std::string second_id = json::parse(second.body)["id"];
  // Back to the first response with other words: the window is that conversation and the new words.
  h.previous = first_id;
  h.input = json::array({ResponsesHarness::user("a different second")});
  EXPECT_EQ(h.post(h.chained_body()).status, 502);
  h.turn();
  EXPECT_EQ(h.state()["history_edits"], 1);
  const std::string branched = make_tokenizer("byte")->decode(session_prompts(bench, "chain-retry").back());
  EXPECT_NE(branched.find("a different second"), std::string::npos) << branched;
  EXPECT_EQ(branched.find("<|im_start|>user\nsecond"), std::string::npos) << branched;
  h.input = json::array({ResponsesHarness::user("x")});
  expect_previous_not_found(h.post(h.chained_body({{"previous_response_id", second_id}})));
  (void)first;
}

// POST /v1/responses/input_tokens (the Responses API's count): the size of the prompt that request then
// sends, with or without a session; a previous_response_id's conversation counted through the session's
// chain (path or Bearer), the same count as the whole conversation sent statelessly; the chain unchanged by
// counting; and the refusals.
TEST(GatewayResponses, InputTokensIsTheSizeOfThePromptThenSent) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const auto count = [&](const std::string& path, const json& body, const std::string& bearer = "") {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!bearer.empty()) headers.emplace_back("Authorization", "Bearer " + bearer);
    return client.call("POST", path, body.dump(), "application/json", "", headers);
  };
  const auto tokens = [](const server::testing::Reply& reply) {
    EXPECT_EQ(reply.status, 200) << reply.body;
    const json answer = json::parse(reply.body, nullptr, false);
    EXPECT_EQ(answer["object"], "response.input_tokens") << reply.body;
    return answer.value("input_tokens", size_t{0});
  };
  ChainedHarness chained(bench.port(), "counted", "n1");
  const size_t sessionless = tokens(count("/v1/responses/input_tokens", chained.chained_body()));
  EXPECT_EQ(tokens(count("/v1/sessions/counted/v1/responses/input_tokens", chained.chained_body())),
            sessionless);
  const json first = chained.turn();
  ASSERT_EQ(bench.upstream->calls().size(), 1u);
  EXPECT_EQ(sessionless, bench.upstream->calls()[0].prompt.size());

  // The next call, chained: counted through the session's chain, as the whole conversation sent at once.
  chained.input.push_back(ResponsesHarness::user("step 1 output: ok"));
  ResponsesHarness whole(bench.port(), "whole", "n1");
  for (const json& item : first["output"]) whole.input.push_back(item);
  whole.input.push_back(ResponsesHarness::user("step 1 output: ok"));
  const size_t stateless = tokens(count("/v1/responses/input_tokens", whole.body()));
  EXPECT_GT(stateless, sessionless);
  EXPECT_EQ(tokens(count("/v1/sessions/counted/v1/responses/input_tokens", chained.chained_body())),
            stateless);
  EXPECT_EQ(tokens(count("/v1/responses/input_tokens", chained.chained_body(), "counted")), stateless);
  // Counting borrowed nothing for good: the chained call goes on from the same response.
  chained.turn();
  EXPECT_EQ(bench.upstream->calls().back().prompt.size(), stateless);
  EXPECT_EQ(chained.state()["history_edits"], 0);

  // Refusals: a previous_response_id without a session, or one the session does not have; an unknown
  // session; a malformed body; another method.
  chained.input.push_back(ResponsesHarness::user("step 2 output: ok"));
  expect_previous_not_found(count("/v1/responses/input_tokens", chained.chained_body()));
  expect_previous_not_found(count("/v1/sessions/counted/v1/responses/input_tokens",
                                  chained.chained_body({{"previous_response_id", "resp_nowhere"}})));
  const auto unknown = count("/v1/sessions/nobody/v1/responses/input_tokens", chained.chained_body());
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  const auto malformed = count("/v1/responses/input_tokens", {{"model", "test"}, {"input", 5}});
  EXPECT_EQ(malformed.status, 400) << malformed.body;
  EXPECT_EQ(json::parse(malformed.body)["error"]["param"], "input") << malformed.body;
  EXPECT_EQ(client.call("GET", "/v1/responses/input_tokens").status, 405);
  EXPECT_EQ(client.call("POST", "/v1/responses/elsewhere", "{}").status, 404);
}

// include: ["message.output_text.logprobs"] (with top_logprobs K): the output_text part carries one entry per
// sampled token, the ids and log-probs the upstream sampled and the export records (tool-call and
// end-of-turn tokens included, as chat's logprobs.content), each with the upstream's K most likely
// alternatives; streamed, the delta and done events carry them without bytes (the events' Logprob) and the
// part's done and completed events with. Not included: no logprobs, and no alternatives asked upstream.
// A retry answers the stored entries. Bad values are refused naming the field.
TEST(GatewayResponses, IncludedLogprobsAreTheSampledTokens) {
  const std::shared_ptr<const Tokenizer> bytes_tokenizer = make_tokenizer("byte");
  const auto token_bytes = [&](TokenId id) {
    return bytes_tokenizer->decode(std::span<const TokenId>(&id, 1));
  };
  const auto bytes_of = [](const json& entry) {
    std::string out;
    for (const json& b : entry["bytes"]) out += static_cast<char>(b.get<int>());
    return out;
  };
  // `entries` against the upstream call: one per sampled id, K alternatives each; `with_bytes`: each entry
  // and alternative carries its bytes (else none).
  const auto expect_entries = [&](const json& entries, const crl::testing::LoggedCall& call, size_t k,
                                  bool with_bytes) {
    ASSERT_TRUE(entries.is_array()) << entries;
    ASSERT_EQ(entries.size(), call.output.size()) << "one entry per sampled id";
    for (size_t i = 0; i < entries.size(); ++i) {
      const json& entry = entries[i];
      EXPECT_EQ(static_cast<float>(entry["logprob"].get<double>()), call.logprobs[i]) << i;
      EXPECT_EQ(entry["token"], token_bytes(call.output[i])) << i;  // (ASCII answers)
      EXPECT_EQ(entry.contains("bytes"), with_bytes) << entry;
      if (with_bytes) {
        EXPECT_EQ(bytes_of(entry), token_bytes(call.output[i])) << i;
      }
      ASSERT_EQ(entry["top_logprobs"].size(), k) << entry;
      for (size_t j = 0; j < k; ++j) {
        const json& top = entry["top_logprobs"][j];
        EXPECT_EQ(top["token"], token_bytes(call.top[i][j].first)) << i << " " << j;
        EXPECT_EQ(static_cast<float>(top["logprob"].get<double>()), call.top[i][j].second) << i << " " << j;
        EXPECT_EQ(top.contains("bytes"), with_bytes) << top;
      }
    }
  };
  const json include = json::array({"reasoning.encrypted_content", "message.output_text.logprobs"});
  Bench bench;
  ResponsesHarness h(bench.port(), "logprobs");
  const json answer = h.turn({{"include", include}, {"top_logprobs", 2}});
  const crl::testing::LoggedCall call = bench.upstream->calls().back();
  EXPECT_EQ(call.top_logprobs, 2) << "the alternatives are asked of the upstream";
  ASSERT_EQ(answer["output"].size(), 1u) << answer;
  const json& part = answer["output"][0]["content"][0];
  EXPECT_EQ(part["type"], "output_text");
  expect_entries(part["logprobs"], call, 2, true);
  EXPECT_EQ(part["logprobs"].size(), answer["usage"]["output_tokens"]);
  std::string joined;
  for (const json& entry : part["logprobs"]) joined += bytes_of(entry);
  EXPECT_EQ(joined, bytes_tokenizer->decode(call.output)) << "the sampled text, end of turn included";
  // A retry of the same input: the stored answer, its entries included, nothing sampled again.
  h.input.erase(h.input.end() - 1);
  EXPECT_EQ(h.turn({{"include", include}, {"top_logprobs", 2}}), answer);
  EXPECT_EQ(bench.upstream->calls().size(), 1u);

  // Not included: no logprobs on the part, and top_logprobs alone asks the upstream for nothing.
  h.input.push_back(ResponsesHarness::user("next"));
  const json plain = h.turn({{"top_logprobs", 3}});
  EXPECT_FALSE(plain["output"][0]["content"][0].contains("logprobs")) << plain;
  EXPECT_EQ(bench.upstream->calls().back().top_logprobs, 0);
  EXPECT_EQ(h.state()["history_edits"], 0) << "the copy with its logprobs is recognised as the answer";

  // Streamed.
  ResponsesHarness streamed(bench.port(), "logprobs-stream");
  const auto reply =
      streamed.post(streamed.body({{"stream", true}, {"include", include}, {"top_logprobs", 1}}));
  ASSERT_EQ(reply.status, 200) << reply.body;
  const crl::testing::LoggedCall streamed_call = bench.upstream->calls().back();
  std::map<std::string, json> events;
  for (const ResponseEvent& e : response_events(reply.body)) events[e.name] = e.payload;
  expect_entries(events["response.output_text.delta"]["logprobs"], streamed_call, 1, false);
  expect_entries(events["response.output_text.done"]["logprobs"], streamed_call, 1, false);
  expect_entries(events["response.content_part.done"]["part"]["logprobs"], streamed_call, 1, true);
  expect_entries(events["response.completed"]["response"]["output"][0]["content"][0]["logprobs"],
                 streamed_call, 1, true);
  EXPECT_FALSE(events["response.content_part.added"]["part"].contains("logprobs"));
  // Not included, streamed: the events' logprobs are empty lists, as before.
  streamed.input.push_back(ResponsesHarness::user("next"));
  const auto bare = streamed.post(streamed.body({{"stream", true}}));
  ASSERT_EQ(bare.status, 200) << bare.body;
  for (const ResponseEvent& e : response_events(bare.body)) {
    if (e.name == "response.output_text.delta" || e.name == "response.output_text.done") {
      EXPECT_EQ(e.payload["logprobs"], json::array()) << e.text;
    }
  }

  // Bad values, each a 400 naming the field.
  for (const auto& [field, value, param] : std::vector<std::tuple<std::string, json, std::string>>{
           {"include", "message.output_text.logprobs", "include"},
           {"include", json::array({"message.output_text.logprobs", 7}), "include[1]"},
           {"top_logprobs", 21, "top_logprobs"},
           {"top_logprobs", -1, "top_logprobs"},
           {"top_logprobs", 1.5, "top_logprobs"}}) {
    const auto refused = h.post(h.body({{field, value}, {"include", field == "include" ? value : include}}));
    EXPECT_EQ(refused.status, 400) << field << " " << value.dump();
    const json error = json::parse(refused.body, nullptr, false);
    EXPECT_EQ(error["error"]["param"], param) << refused.body;
  }
  EXPECT_EQ(h.state()["status"], "running") << "refusals leave the session as it was";
}

// Two conversations in one session (a harness's sub-agents), interleaved and each chaining its calls with
// previous_response_id: each continues its own conversation (a thread of the session with its own window,
// a line of the session's chain), with no history edit, and the export holds both.
TEST(GatewayResponses, InterleavedChainedConversationsEachContinueTheirOwn) {
  Bench bench;
  ChainedHarness main(bench.port(), "two-chains", "c1");
  ChainedHarness sub(bench.port(), "two-chains", "c2");
  const auto tokenizer = make_tokenizer("byte");
  for (int t = 0; t < 5; ++t) {
    for (ChainedHarness* h : {&main, &sub}) {
      if (t)
        h->input.push_back(
            ResponsesHarness::user((h == &main ? "main step " : "sub step ") + std::to_string(t)));
      const json answer = h->turn();
      ASSERT_EQ(h->last.status, 200) << h->last.body;
      const std::string prompt = tokenizer->decode(bench.upstream->calls().back().prompt);
      const std::string own = h == &main ? "marker=c1" : "marker=c2",
                        other = h == &main ? "marker=c2" : "marker=c1";
      EXPECT_NE(prompt.find(own), std::string::npos) << prompt;
      EXPECT_EQ(prompt.find(other), std::string::npos) << "no cross-talk: " << prompt;
      if (t) {
        EXPECT_NE(prompt.find((h == &main ? "main step " : "sub step ") + std::to_string(t)),
                  std::string::npos);
      }
      (void)answer;
    }
  }
  const json state = main.state();
  EXPECT_EQ(state["history_edits"], 0) << state;
  EXPECT_EQ(state["threads"], 2) << state;
  ASSERT_EQ(main.reward(1.0).status, 200);
  EXPECT_EQ(main.export_json()["segments"][0]["metadata"]["threads"], "2");
}

}  // namespace
}  // namespace crl::server::gateway::testing
