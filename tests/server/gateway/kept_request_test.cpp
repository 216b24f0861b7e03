// A session's kept body (server/gateway/kept_request.h): a chat body decoded after the messages it repeats
// of the last one gives exactly what decoding it whole gives (messages, their keys, every other field), and
// exactly the same error (status, code, message, field) when it is refused; the differential test runs both
// decoders over thousands of bodies derived from a conversation by appends, edits, truncations and
// corruptions.
#include "server/gateway/kept_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "server/gateway/anthropic_codec.h"
#include "server/gateway/gateway_session.h"
#include "server/gateway/openai_codec.h"
#include "server/gateway/responses_codec.h"

namespace crl::server::gateway {
namespace {

using nlohmann::json;

// What a decode gave: the request's fields, or the error's.
struct Outcome {
  std::optional<ChatRequest> request;
  int status = 0;
  std::string code, message, param;
};

// Runs a decode, keeping its request or its error.
template <class Decode>
Outcome outcome_of(Decode decode) {
  Outcome out;
  try {
    out.request = decode();
  } catch (const GatewayError& e) {
    out.status = e.status();
    out.code = e.code();
    out.message = e.what();
    out.param = e.param();
  }
  return out;
}

Outcome whole(const std::string& body) {
  return outcome_of([&] { return parse_chat_request(body); });
}

Outcome whole_anthropic(const std::string& body) {
  return outcome_of([&] { return parse_messages_request(body, false); });
}

Outcome whole_responses(const std::string& body) {
  return outcome_of([&] { return parse_responses_request(body); });
}

enum class Api { kOpenAI, kAnthropic, kResponses };

Outcome incremental(const std::string& body, KeptRequest& kept, Api api = Api::kOpenAI) {
  Outcome out = outcome_of([&] {
    switch (api) {
      case Api::kOpenAI:
        return parse_chat_request(body, kept);
      case Api::kAnthropic:
        return parse_messages_request(body, kept);
      default:
        return parse_responses_request(body, kept);
    }
  });
  if (!out.request) return out;
  EXPECT_EQ(out.request->turn.keys.size(), out.request->turn.messages.size());
  for (size_t i = 0; i < out.request->turn.messages.size(); ++i)
    EXPECT_EQ(out.request->turn.keys[i], message_key(out.request->turn.messages[i]))
        << "key of message " << i;
  // A copy is compared; the decoded messages go back to the kept body as after a call.
  if (out.request->turn.tools_key) {
    EXPECT_EQ(*out.request->turn.tools_key, tools_key(out.request->turn.tools));
  }
  ChatTurn lent = out.request->turn;
  kept.give_back(lent);
  return out;
}

void expect_same(const Outcome& a, const Outcome& b, const std::string& body) {
  SCOPED_TRACE("body: " + body.substr(0, 400));
  ASSERT_EQ(a.request.has_value(), b.request.has_value()) << a.message << " | " << b.message;
  if (!a.request) {
    EXPECT_EQ(a.status, b.status);
    EXPECT_EQ(a.code, b.code);
    EXPECT_EQ(a.message, b.message);
    EXPECT_EQ(a.param, b.param);
    return;
  }
  const ChatTurn &x = a.request->turn, &y = b.request->turn;
  EXPECT_EQ(x.messages, y.messages);
  EXPECT_EQ(x.tools, y.tools);
  EXPECT_EQ(x.max_tokens, y.max_tokens);
  EXPECT_EQ(x.temperature, y.temperature);
  EXPECT_EQ(x.top_p, y.top_p);
  EXPECT_EQ(x.top_k, y.top_k);
  EXPECT_EQ(x.stop, y.stop);
  EXPECT_EQ(a.request->stream, b.request->stream);
  EXPECT_EQ(a.request->include_usage, b.request->include_usage);
  EXPECT_EQ(a.request->model, b.request->model);
  EXPECT_EQ(a.request->previous_response_id, b.request->previous_response_id);
  EXPECT_EQ(a.request->instruction_messages, b.request->instruction_messages);
}

json conversation(int turns) {
  json messages =
      json::array({{{"role", "system"}, {"content", "You are a test agent. \"Quotes\", \\ and \u00e9."}},
                   {{"role", "user"}, {"content", "Task: count to " + std::to_string(turns)}}});
  for (int i = 0; i < turns; ++i) {
    if (i % 3 == 2) {
      messages.push_back(
          {{"role", "assistant"},
           {"content", nullptr},
           {"tool_calls",
            json::array({{{"id", "call_" + std::to_string(i)},
                          {"type", "function"},
                          {"function", {{"name", "shell"}, {"arguments", "{\"cmd\": \"ls\"}"}}}}})}});
      messages.push_back(
          {{"role", "tool"}, {"tool_call_id", "call_" + std::to_string(i)}, {"content", "a\nb"}});
    } else {
      messages.push_back({{"role", "assistant"}, {"content", "step " + std::to_string(i)}});
      messages.push_back(
          {{"role", "user"},
           {"content", json::array({{{"type", "text"}, {"text", "ok \n\t" + std::to_string(i)}}})}});
    }
  }
  return messages;
}

json body_of(const json& messages, const json& tools = nullptr) {
  json body = {{"model", "m"}, {"messages", messages}, {"max_tokens", 64}, {"temperature", 0.5}};
  if (!tools.is_null()) body["tools"] = tools;
  return body;
}

json tools_list(const std::string& description) {
  return json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "shell"},
          {"description", description},
          {"parameters", {{"type", "object"}, {"properties", {{"cmd", {{"type", "string"}}}}}}}}}},
       {{"type", "function"}, {"function", {{"name", "done"}, {"parameters", json::object()}}}}});
}

TEST(KeptRequest, AGrowingConversationDecodesOnlyItsNewMessages) {
  KeptRequest kept;
  const json all = conversation(12);
  for (size_t n = 2; n <= all.size(); n += 2) {
    const json messages(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string body = body_of(messages).dump();
    expect_same(incremental(body, kept), whole(body), body);
    EXPECT_EQ(kept.last_repeated(), n == 2 ? 0u : n - 2) << "messages taken from the kept body";
    EXPECT_EQ(kept.last_read_middle(), n > 2) << "only the new messages were read";
  }
  // The same body again (a harness's retry): every message repeats, nothing is new.
  const std::string body = body_of(all).dump();
  expect_same(incremental(body, kept), whole(body), body);
  EXPECT_EQ(kept.last_repeated(), all.size());
  EXPECT_TRUE(kept.last_read_middle());
}

// Text inserted between the kept messages and the kept tail that is not a list of messages: a second key, a
// key repeated, a second document, a dangling comma, an unclosed string. Each decodes as the whole body does.
TEST(KeptRequest, AMiddleThatIsNotJustMessagesDecodesAsTheWholeBody) {
  const std::string first = body_of(conversation(2)).dump();
  const size_t close = first.find("],\"model\"");
  ASSERT_NE(close, std::string::npos);
  const std::string message = R"({"role":"user","content":"x"})";
  const char* middles[] = {"",
                           "  \n",
                           ",",
                           ",1",
                           ",1],\"n\":[2",
                           ",1],\"n\":2,\"x\":[",
                           ",1],\"max_tokens\":[2",
                           ",1]}{\"a\":[",
                           ",\"",
                           ",[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                           "[[[[[[[[[[[[[[[[[[[[[[[["};
  for (const char* m : middles) {
    for (const std::string& middle : {std::string(m), "," + message + m}) {
      KeptRequest kept;
      incremental(first, kept);
      std::string body = first;
      body.insert(close, middle);
      const Outcome a = incremental(body, kept);
      expect_same(a, whole(body), body);
      // What was kept is still the first body (or this one, when it was good): a good next body decodes.
      std::string next = a.request ? body : first;
      next.insert(next.find("],\"model\""), "," + message);
      expect_same(incremental(next, kept), whole(next), next);
    }
  }
}

// A refused body whose tools differ must not leave its tools with the kept body: the next body that repeats
// the kept one (tools and all) gets the kept tools.
TEST(KeptRequest, ARefusedBodyWithOtherToolsLeavesTheKeptToolsAlone) {
  KeptRequest kept;
  const json all = conversation(4);
  const json tools = tools_list("a"), other = tools_list("b");
  const std::string first = body_of(json(all.begin(), all.begin() + 4), tools).dump();
  expect_same(incremental(first, kept), whole(first), first);
  json refused = body_of(json(all.begin(), all.begin() + 6), other);
  refused["max_tokens"] = 0;
  const Outcome bad = incremental(refused.dump(), kept);
  expect_same(bad, whole(refused.dump()), refused.dump());
  EXPECT_EQ(bad.param, "max_tokens");
  const std::string next = body_of(json(all.begin(), all.begin() + 6), tools).dump();
  const Outcome good = incremental(next, kept);
  expect_same(good, whole(next), next);
  EXPECT_EQ(good.request->turn.tools, tools_list("a"));
}

// A body that both APIs accept, kept by one, is decoded whole by the other (the fields differ: OpenAI reads
// `stop`, Anthropic `stop_sequences`; Anthropic's `system` is a message).
TEST(KeptRequest, AKeptBodyOfOneApiIsNotReadForTheOther) {
  KeptRequest kept;
  json body = {{"max_tokens", 8},
               {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
               {"stop", json::array({"x"})}};
  expect_same(incremental(body.dump(), kept), whole(body.dump()), body.dump());
  body["messages"].push_back({{"role", "assistant"}, {"content", "ho"}});
  const Outcome a = incremental(body.dump(), kept, Api::kAnthropic);
  expect_same(a, whole_anthropic(body.dump()), body.dump());
  EXPECT_TRUE(a.request->turn.stop.empty());
  EXPECT_EQ(kept.last_repeated(), 0u);
}

TEST(KeptRequest, WhitespaceKeysBeforeTheListAndToolsAfterIt) {
  KeptRequest kept;
  const json all = conversation(6);
  json tools = json::array(
      {{{"type", "function"}, {"function", {{"name", "shell"}, {"parameters", json::object()}}}}});
  for (size_t n = 2; n <= all.size(); n += 2) {
    json body = {{"stream", false},
                 {"max_tokens", 32},
                 {"messages", json(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n))},
                 {"tools", tools},
                 {"stop", json::array({"</done>"})}};
    const std::string text = " \n" + body.dump(2) + "\n";  // pretty-printed, keys sorted: messages second
    expect_same(incremental(text, kept), whole(text), text);
  }
  EXPECT_GT(kept.last_repeated(), 0u);
}

TEST(KeptRequest, AKeyBeforeTheListRepeatedAfterItIsStillADuplicate) {
  KeptRequest kept;
  const std::string first = R"({"model":"a","messages":[{"role":"user","content":"hi"}]})";
  expect_same(incremental(first, kept), whole(first), first);
  const std::string second =
      R"({"model":"a","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}],"model":"b"})";
  const Outcome out = incremental(second, kept);
  expect_same(out, whole(second), second);
  EXPECT_EQ(out.code, "duplicate_key");
}

TEST(KeptRequest, ABadNewMessageIsNamedByItsIndexInTheWholeList) {
  KeptRequest kept;
  const json all = conversation(4);
  const std::string first = body_of(all).dump();
  incremental(first, kept);
  json more = all;
  more.push_back({{"role", "wizard"}, {"content", "x"}});
  const std::string second = body_of(more).dump();
  const Outcome out = incremental(second, kept);
  expect_same(out, whole(second), second);
  EXPECT_EQ(out.param, "messages[" + std::to_string(all.size()) + "].role");
  // The refused body changed nothing kept: the next good body still repeats the first one's messages.
  more.back() = {{"role", "user"}, {"content", "x"}};
  const std::string third = body_of(more).dump();
  expect_same(incremental(third, kept), whole(third), third);
  EXPECT_EQ(kept.last_repeated(), all.size());
}

TEST(KeptRequest, MessagesNotGivenBackAreNotReused) {
  KeptRequest kept;
  const std::string body = body_of(conversation(3)).dump();
  ChatRequest first = parse_chat_request(body, kept);
  EXPECT_EQ(kept.repeated(body, BodyApi::kOpenAIChat).messages, 0u) << "lent messages cannot be taken again";
  kept.give_back(first.turn);
  EXPECT_EQ(kept.repeated(body, BodyApi::kOpenAIChat).messages, conversation(3).size());
  kept.clear();
  EXPECT_EQ(kept.repeated(body, BodyApi::kOpenAIChat).messages, 0u);
}

// The same tools on every call are decoded and keyed once; other tools (or none) are seen as they are.
TEST(KeptRequest, ToolsAreDecodedOncePerDistinctText) {
  KeptRequest kept;
  const json all = conversation(6);
  const json tools = tools_list("run a command"), other = tools_list("run a command, politely");
  for (size_t n = 2; n <= 8; n += 2) {
    const std::string body =
        body_of(json(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n)), tools).dump();
    expect_same(incremental(body, kept), whole(body), body);
  }
  EXPECT_EQ(kept.tools_decoded(), 1u);
  const std::string changed = body_of(all, other).dump();
  const Outcome with_other = incremental(changed, kept);
  expect_same(with_other, whole(changed), changed);
  EXPECT_EQ(kept.tools_decoded(), 2u);
  EXPECT_NE(*with_other.request->turn.tools_key, tools_key(tools));
  const std::string none = body_of(all).dump();
  const Outcome without = incremental(none, kept);
  expect_same(without, whole(none), none);
  EXPECT_TRUE(without.request->turn.tools.is_null());
  EXPECT_EQ(without.request->turn.tools_key.value_or(1), 0u);
  const std::string back = body_of(all, tools).dump();
  expect_same(incremental(back, kept), whole(back), back);
  EXPECT_EQ(kept.tools_decoded(), 3u);
}

// A harness's list grows without bound after compactions: a body over the limit is decoded (exactly, whole)
// but not kept.
TEST(KeptRequest, ABodyOverTheLimitIsNotKept) {
  KeptRequest kept;
  json messages =
      json::array({{{"role", "user"}, {"content", std::string(KeptRequest::kMaxKeptBytes, 'x')}}});
  const std::string body = body_of(messages).dump();
  expect_same(incremental(body, kept), whole(body), "(over the limit)");
  EXPECT_EQ(kept.repeated(body, BodyApi::kOpenAIChat).messages, 0u);
  messages[0]["content"] = "small";
  const std::string small = body_of(messages).dump();
  incremental(small, kept);
  EXPECT_EQ(kept.repeated(small, BodyApi::kOpenAIChat).messages, 1u);
}

// Bodies derived from the last accepted one, as harnesses (and attackers) send them.
std::string mutate(const std::string& last, const json& all, std::mt19937_64& rng) {
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  switch (rng() % 9) {
    case 0:
    case 1: {  // the conversation at some length (mostly growing), with one of two tool lists or none
      const size_t n = 1 + pick(all.size());
      const json tools[] = {nullptr, tools_list("a"), tools_list("b")};
      json body = body_of(json(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n)), tools[pick(3)]);
      if (pick(15) == 0) body["max_tokens"] = 0;  // refused after its tools were seen
      return body.dump();
    }
    case 2: {  // one byte changed anywhere
      std::string s = last;
      if (!s.empty()) s[pick(s.size())] = "{}[],:\"\\ax0 \x01\xc3"[pick(15)];
      return s;
    }
    case 3: {  // cut anywhere
      return last.substr(0, pick(last.size() + 1));
    }
    case 4: {  // bytes inserted anywhere
      std::string s = last;
      const char* inserts[] = {",", " ",  "{\"role\":\"user\",\"content\":\"z\"},",
                               "]", "\"", ",\"model\":\"q\""};
      s.insert(pick(s.size() + 1), inserts[pick(6)]);
      return s;
    }
    case 5: {  // an earlier message edited (the harness rewrote its history)
      json messages = json::parse(body_of(all).dump())["messages"];
      const size_t n = 2 + pick(all.size() - 1);
      messages = json(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(n));
      messages[pick(n)]["content"] = "edited " + std::to_string(rng() % 100);
      return body_of(messages).dump();
    }
    case 6: {  // a bad message appended
      json messages = json::parse(body_of(all).dump())["messages"];
      messages.push_back(json::array({1, 2}));
      return body_of(messages).dump();
    }
    case 7: {  // the same body again
      return last;
    }
    default: {  // the last body with one more message appended textually before the list's end
      const size_t close = last.rfind(']');
      if (close == std::string::npos) return last;
      std::string s = last;
      s.insert(close, ",{\"role\":\"user\",\"content\":\"more \\u00e9\"}");
      return s;
    }
  }
}

TEST(KeptRequest, DecodesAsTheWholeBodyDoesOverThousandsOfDerivedBodies) {
  const json all = conversation(10);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    KeptRequest kept;
    std::string last = body_of(json(all.begin(), all.begin() + 4)).dump();
    size_t reused = 0;
    for (int step = 0; step < 700; ++step) {
      const std::string body = mutate(last, all, rng);
      const Outcome a = incremental(body, kept), b = whole(body);
      expect_same(a, b, body);
      if (::testing::Test::HasFailure()) return;  // one body in the log, not hundreds
      if (a.request) {
        last = body;
        reused += kept.last_repeated();
      }
    }
    EXPECT_GT(reused, 0u) << "the derived bodies exercised the kept path";
  }
}

// Anthropic bodies: a system prompt outside the list (a lead message), turns that map onto several messages
// (tool_result blocks), and the cache_control marker Claude Code moves to the newest message on every call.
json anthropic_conversation(int turns) {
  json messages = json::array({{{"role", "user"}, {"content", "Task: count to " + std::to_string(turns)}}});
  for (int i = 0; i < turns; ++i) {
    if (i % 2 == 0) {
      messages.push_back({{"role", "assistant"},
                          {"content", json::array({{{"type", "text"}, {"text", "step " + std::to_string(i)}},
                                                   {{"type", "tool_use"},
                                                    {"id", "tu_" + std::to_string(i)},
                                                    {"name", "shell"},
                                                    {"input", {{"cmd", "ls"}}}}})}});
      messages.push_back({{"role", "user"},
                          {"content", json::array({{{"type", "tool_result"},
                                                    {"tool_use_id", "tu_" + std::to_string(i)},
                                                    {"content", "a\nb \u00e9"}},
                                                   {{"type", "text"}, {"text", "and go on"}}})}});
    } else {
      messages.push_back({{"role", "assistant"}, {"content", "thinking about " + std::to_string(i)}});
      messages.push_back({{"role", "user"}, {"content", "ok " + std::to_string(i)}});
    }
  }
  return messages;
}

json anthropic_tools_list(const std::string& description) {
  return json::array(
      {{{"name", "shell"},
        {"description", description},
        {"input_schema", {{"type", "object"}, {"properties", {{"cmd", {{"type", "string"}}}}}}}},
       {{"name", "done"}, {"input_schema", json::object()}}});
}

// Claude Code's shape: the newest message's last block carries cache_control (a string content becomes a
// block for it).
json anthropic_body(json messages, const json& tools, const json& system, bool cache_newest) {
  if (cache_newest && !messages.empty()) {
    json& last = messages.back()["content"];
    if (last.is_string()) last = json::array({{{"type", "text"}, {"text", last.get<std::string>()}}});
    last.back()["cache_control"] = {{"type", "ephemeral"}};
  }
  json body = {{"model", "claude"}, {"max_tokens", 512}, {"messages", messages}};
  if (!system.is_null()) body["system"] = system;
  if (!tools.is_null()) body["tools"] = tools;
  body["metadata"] = {{"user_id", "u"}};
  return body;
}

const json kSystemBlocks = json::array(
    {{{"type", "text"}, {"text", "You are a coding agent."}, {"cache_control", {{"type", "ephemeral"}}}}});

TEST(KeptRequest, AnAnthropicConversationDecodesOnlyItsNewTurns) {
  const json all = anthropic_conversation(10);
  for (const bool cache_newest : {false, true}) {
    KeptRequest kept;
    for (size_t n = 1; n <= all.size(); n += 2) {
      const std::string body = anthropic_body(json(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n)),
                                              anthropic_tools_list("run"), kSystemBlocks, cache_newest)
                                   .dump();
      const Outcome a = incremental(body, kept, Api::kAnthropic);
      expect_same(a, whole_anthropic(body), body);
      // (With the marker, the first body's only turn changes in the second.)
      if (n > (cache_newest ? 3u : 1u)) {
        EXPECT_TRUE(kept.last_read_middle()) << n;
        // The newest kept turn is read again when the harness moved its cache_control marker.
        EXPECT_GE(kept.last_repeated(), 1u) << n;
      }
    }
    EXPECT_EQ(kept.tools_decoded(), 1u);
  }
}

// Bodies derived from the last accepted one: other lengths, system prompts and tools (which sit after the
// list, in the tail), moved cache markers, and the byte edits of mutate().
std::string mutate_anthropic(const std::string& last, const json& all, std::mt19937_64& rng) {
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  switch (rng() % 8) {
    case 0:
    case 1:
    case 2: {
      const size_t n = 1 + pick(all.size());
      const json tools[] = {nullptr, anthropic_tools_list("a"), anthropic_tools_list("b"),
                            json::array({{{"description", "no name"}}})};
      const json systems[] = {nullptr, "Be brief.", kSystemBlocks, json::array({1})};
      json body =
          anthropic_body(json(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n)),
                         tools[pick(3) + (pick(20) == 0)], systems[pick(3) + (pick(20) == 0)], pick(2) == 0);
      if (pick(15) == 0) body["max_tokens"] = 0;
      return body.dump();
    }
    case 3: {  // a turn with a bad block appended
      json body = json::parse(last, nullptr, false);
      if (!body.is_object() || !body.contains("messages") || !body["messages"].is_array()) return last;
      body["messages"].push_back({{"role", "user"}, {"content", json::array({{{"type", "image"}}})}});
      return body.dump();
    }
    default:
      return mutate(last, all, rng);  // byte edits, cuts, insertions, the same body again
  }
}

// Six seeds of 700 bodies, each derived by `derive` from the last accepted one, decoded both ways by `api`
// (`whole` decodes a body whole): the same answer or the same error every time, and the middle read alone
// often enough to matter.
template <class Derive, class Whole>
void expect_same_over_derived_bodies(Api api, const std::string& first, Derive derive, Whole whole_decode) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    KeptRequest kept;
    std::string last = first;
    size_t middles = 0;
    for (int step = 0; step < 700; ++step) {
      const std::string body = derive(last, rng);
      const Outcome a = incremental(body, kept, api), b = whole_decode(body);
      expect_same(a, b, body);
      if (::testing::Test::HasFailure()) return;  // one body in the log, not hundreds
      if (a.request) {
        last = body;
        middles += kept.last_read_middle();
      }
    }
    EXPECT_GT(middles, 20u) << "the derived bodies exercised the middle";
  }
}

TEST(KeptRequest, AnthropicBodiesDecodeAsTheWholeBodyDoesOverThousandsOfDerivedBodies) {
  const json all = anthropic_conversation(10);
  expect_same_over_derived_bodies(
      Api::kAnthropic,
      anthropic_body(json(all.begin(), all.begin() + 3), anthropic_tools_list("a"), kSystemBlocks, true)
          .dump(),
      [&](const std::string& last, std::mt19937_64& rng) { return mutate_anthropic(last, all, rng); },
      whole_anthropic);
}

// Responses bodies (Codex's shape): instructions before the input, assistant turns as several items (a
// message, then function_call items that join it), reasoning items that decode to nothing, outputs.
json responses_conversation(int turns) {
  json items = json::array({{{"type", "message"},
                             {"role", "user"},
                             {"content", json::array({{{"type", "input_text"}, {"text", "Task: count"}}})}}});
  for (int i = 0; i < turns; ++i) {
    const std::string n = std::to_string(i);
    const auto call = [&](const std::string& id) {
      items.push_back({{"type", "function_call"},
                       {"id", "fc_" + id},
                       {"call_id", "call_" + id},
                       {"name", "shell"},
                       {"arguments", "{\"cmd\":\"ls " + id + "\"}"}});
    };
    const auto output = [&](const std::string& id) {
      items.push_back(
          {{"type", "function_call_output"}, {"call_id", "call_" + id}, {"output", "a\nb \u00e9 " + id}});
    };
    if (i % 3 == 0) {
      items.push_back({{"type", "reasoning"}, {"id", "rs_" + n}, {"summary", json::array()}});
      items.push_back({{"type", "message"},
                       {"role", "assistant"},
                       {"id", "msg_" + n},
                       {"content", json::array({{{"type", "output_text"}, {"text", "step " + n}}})}});
      call(n + "a");
      call(n + "b");
      output(n + "a");
      output(n + "b");
    } else if (i % 3 == 1) {
      call(n);
      output(n);
    } else {
      items.push_back({{"role", "assistant"}, {"content", "thinking " + n}});
      items.push_back({{"role", "user"}, {"content", "ok " + n}});
    }
  }
  return items;
}

json responses_tools_list(const std::string& description) {
  return json::array({{{"type", "function"},
                       {"name", "shell"},
                       {"description", description},
                       {"parameters", {{"type", "object"}, {"properties", {{"cmd", {{"type", "string"}}}}}}}},
                      {{"type", "function"}, {"name", "done"}}});
}

std::string responses_body(const json& items, const json& tools, const json& instructions) {
  nlohmann::ordered_json body = {{"model", "codex"}};
  if (!instructions.is_null()) body["instructions"] = instructions;
  body["input"] = items;
  if (!tools.is_null()) body["tools"] = tools;
  body["tool_choice"] = "auto";
  body["store"] = false;
  body["stream"] = true;
  return body.dump();
}

json first_items(const json& all, size_t n) {
  return json(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
}

TEST(KeptRequest, AResponsesConversationDecodesOnlyItsNewItems) {
  const json all = responses_conversation(9);
  KeptRequest kept;
  size_t middles = 0;
  for (size_t n = 1; n <= all.size(); ++n) {
    const std::string body = responses_body(first_items(all, n), responses_tools_list("run"), "Be exact.");
    const Outcome a = incremental(body, kept, Api::kResponses);
    expect_same(a, whole_responses(body), body);
    middles += kept.last_read_middle();
  }
  // Every body after the first but those whose first new item is a function_call joining a kept message.
  EXPECT_GE(middles, all.size() - 10);
  EXPECT_EQ(kept.tools_decoded(), 1u);
  // An assistant turn of three items is one message with two tool calls.
  const Outcome last = whole_responses(responses_body(first_items(all, 7), nullptr, nullptr));
  ASSERT_TRUE(last.request);
  ASSERT_EQ(last.request->turn.messages.size(), 4u);
  EXPECT_EQ(last.request->turn.messages[1].content, "step 0");
  EXPECT_EQ(last.request->turn.messages[1].tool_calls.size(), 2u);
  EXPECT_EQ(last.request->turn.messages[3].tool_call_id, "call_0b");
}

// A call that continues a response (previous_response_id: response_chain.h holds its conversation) or sends
// an input string keeps only its tools: decoded once while their text repeats, lent to the call and given
// back; the stateless body after them decodes whole and is kept.
TEST(KeptRequest, ChainedAndStringInputResponsesBodiesKeepOnlyTheirTools) {
  KeptRequest kept;
  const json tools = responses_tools_list("run");
  const auto call = [&](const std::string& body) {
    ResponsesRequest request = parse_responses_request(body, kept);
    const ResponsesRequest whole = parse_responses_request(body);
    EXPECT_EQ(request.turn.messages, whole.turn.messages);
    EXPECT_EQ(request.turn.tools, whole.turn.tools);
    EXPECT_EQ(request.turn.tools_key.value_or(0), tools_key(whole.turn.tools));
    EXPECT_EQ(request.previous_response_id, whole.previous_response_id);
    ChatTurn lent = request.turn;  // a copy goes back, as after a call; the request keeps what it was lent
    kept.give_back(lent);
    return request;
  };
  for (int i = 0; i < 3; ++i) {
    nlohmann::ordered_json body = {{"model", "codex"}, {"previous_response_id", "resp_" + std::to_string(i)}};
    body["input"] = json::array({{{"role", "user"}, {"content", "step " + std::to_string(i)}}});
    body["tools"] = tools;
    EXPECT_EQ(call(body.dump()).previous_response_id, "resp_" + std::to_string(i));
  }
  nlohmann::ordered_json text = {{"model", "codex"}, {"input", "just text"}};
  text["tools"] = tools;
  EXPECT_EQ(call(text.dump()).turn.messages.size(), 1u);
  EXPECT_EQ(kept.tools_decoded(), 1u);
  const std::string stateless = responses_body(first_items(responses_conversation(3), 2), tools, "Be exact.");
  const Outcome b = incremental(stateless, kept, Api::kResponses);
  expect_same(b, whole_responses(stateless), stateless);
  EXPECT_FALSE(kept.last_read_middle());
  EXPECT_EQ(kept.tools_decoded(), 1u);
  // Other tools on a chained call are decoded; no tools lend none.
  nlohmann::ordered_json first = {{"previous_response_id", "resp_8"}, {"input", "x"}};
  first["tools"] = tools;
  const nlohmann::ordered_json first_tools = call(first.dump()).turn.tools;
  ASSERT_TRUE(first_tools.is_array());
  nlohmann::ordered_json other = {{"previous_response_id", "resp_9"}, {"input", "x"}};
  other["tools"] = responses_tools_list("other");
  EXPECT_NE(call(other.dump()).turn.tools, first_tools);
  EXPECT_EQ(kept.tools_decoded(), 2u);
  EXPECT_TRUE(call(R"({"previous_response_id": "resp_9", "input": "x"})").turn.tools.is_null());
  // Tools past the kept limit are not kept (as a whole body past it is not).
  nlohmann::ordered_json huge = {{"previous_response_id", "resp_9"}, {"input", "x"}};
  huge["tools"] = responses_tools_list(std::string(KeptRequest::kMaxKeptBytes, 'd'));
  call(huge.dump());
  call(huge.dump());
  EXPECT_EQ(kept.tools_decoded(), 4u);
}

// A body that repeats the kept one up to a function_call that joined the message before it, and then
// differs: the repeat ends before that message, which is decoded again.
TEST(KeptRequest, ARepeatNeverEndsInsideAResponsesAssistantTurn) {
  const json all = responses_conversation(3);
  for (const bool drop : {false, true}) {
    KeptRequest kept;
    const std::string first = responses_body(first_items(all, 7), nullptr, "Be exact.");
    expect_same(incremental(first, kept, Api::kResponses), whole_responses(first), first);
    json edited = first_items(all, 4);  // ... the message and its first call
    if (drop)
      edited.push_back({{"role", "user"}, {"content", "the second call never happened"}});
    else
      edited.push_back({{"type", "function_call"}, {"call_id", "c"}, {"name", "done"}, {"arguments", "{}"}});
    const std::string body = responses_body(edited, nullptr, "Be exact.");
    const Outcome a = incremental(body, kept, Api::kResponses);
    expect_same(a, whole_responses(body), body);
    ASSERT_TRUE(a.request);
    EXPECT_EQ(a.request->turn.messages[2].tool_calls.size(), drop ? 1u : 2u);
  }
}

std::string mutate_responses(const std::string& last, const json& all, std::mt19937_64& rng) {
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  switch (rng() % 11) {
    case 9:
    case 10: {  // a chained call (only the items after some point) or an input string, tools kept alone
      nlohmann::ordered_json body = nlohmann::ordered_json::parse(
          responses_body(first_items(all, 1 + pick(all.size())), responses_tools_list(pick(2) ? "a" : "b"),
                         pick(2) ? json("Be exact.") : json(nullptr)));
      if (pick(3) == 0) {
        body["input"] = "just the words " + std::to_string(pick(5));
      } else {
        json items = body["input"];
        body["input"] = json(items.begin() + static_cast<std::ptrdiff_t>(pick(items.size())), items.end());
      }
      if (pick(4) != 0)
        body["previous_response_id"] = pick(8) == 0 ? json(7) : json("resp_" + std::to_string(pick(3)));
      return body.dump();
    }
    case 0:
    case 1:
    case 2: {  // the conversation at some length, with other tools or instructions
      const json tools[] = {nullptr, responses_tools_list("a"), responses_tools_list("b"),
                            json::array({{{"type", "web_search"}}})};
      const json instructions[] = {nullptr, "Be exact.", "Be brief.", 7};
      return responses_body(first_items(all, 1 + pick(all.size())), tools[pick(3) + (pick(20) == 0)],
                            instructions[pick(3) + (pick(20) == 0)]);
    }
    case 3:
    case 4: {  // an item edited or removed (a function_call inside an assistant turn, often)
      json items = first_items(all, 2 + pick(all.size() - 1));
      const size_t at = pick(items.size());
      if (pick(2) == 0)
        items.erase(items.begin() + static_cast<std::ptrdiff_t>(at));
      else if (items[at].contains("arguments"))
        items[at]["arguments"] = "{\"cmd\":\"edited\"}";
      else
        items[at]["type"] = pick(2) == 0 ? "function_call" : "item_reference";
      return responses_body(items, nullptr, "Be exact.");
    }
    default:
      return mutate(last, all, rng);  // byte edits, cuts, insertions, the same body again
  }
}

TEST(KeptRequest, ResponsesBodiesDecodeAsTheWholeBodyDoesOverThousandsOfDerivedBodies) {
  const json all = responses_conversation(9);
  expect_same_over_derived_bodies(
      Api::kResponses, responses_body(first_items(all, 3), responses_tools_list("a"), "Be exact."),
      [&](const std::string& last, std::mt19937_64& rng) { return mutate_responses(last, all, rng); },
      whole_responses);
}

// A session keeps a body per conversation calling lately (GatewaySession::kept_request_for): interleaved
// conversations (a harness's sub-agents) each decode only what they add; a fifth conversation reuses the
// least recently used body.
TEST(KeptRequest, ASessionKeepsABodyPerConversation) {
  const GatewayShared shared;
  GatewaySession session("kept", shared, SessionConfig{}, nullptr);
  std::vector<json> conversations;
  for (int c = 0; c < 5; ++c) {
    json messages = conversation(12);
    messages[0]["content"] = "You are agent " + std::to_string(c) + ".";
    conversations.push_back(messages);
  }
  const auto call = [&](int c, size_t n) {
    const json messages(conversations[c].begin(), conversations[c].begin() + static_cast<std::ptrdiff_t>(n));
    const std::string body = body_of(messages).dump();
    KeptRequest& kept = session.kept_request_for(body);
    expect_same(incremental(body, kept), whole(body), body);
    return kept.last_repeated();
  };
  for (size_t n = 2; n <= 10; n += 2) {
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(call(c, n), n == 2 ? 0u : n - 2) << "conversation " << c << " at " << n;
    }
  }
  // A fifth conversation takes the least recently used body (conversation 0's): conversation 1 still
  // decodes only what it adds, conversation 0 decodes whole.
  EXPECT_EQ(call(4, 2), 0u);
  EXPECT_EQ(call(1, 12), 10u);
  EXPECT_EQ(call(0, 12), 0u);
}

// A body lent to a call in flight is that call's: calls of one conversation in flight at once (a retry
// behind its first try; a session's threads wait for the upstream together) each get their own body, more
// than kKeptBodies while they are out; once they are back the session keeps kKeptBodies again, and the
// conversation's next call still decodes only what it adds.
TEST(KeptRequest, ABodyLentToACallInFlightIsNotPickedAgain) {
  const GatewayShared shared;
  GatewaySession session("lent", shared, SessionConfig{}, nullptr);
  const json all = conversation(12);
  const std::string body = body_of(json(all.begin(), all.begin() + 6)).dump();
  std::vector<KeptRequest*> picked;
  std::vector<ChatRequest> calls;  // (each holds its body's messages until it returns them)
  for (size_t i = 0; i < GatewaySession::kKeptBodies + 2; ++i) {
    KeptRequest& kept = session.kept_request_for(body);
    for (const KeptRequest* other : picked) EXPECT_NE(other, &kept) << "call " << i;
    calls.push_back(parse_chat_request(body, kept));
    EXPECT_TRUE(kept.lent());
    EXPECT_EQ(calls.back().turn.messages.size(), 6u);
    picked.push_back(&kept);
  }
  EXPECT_EQ(session.kept_bodies(), GatewaySession::kKeptBodies + 2);
  for (size_t i = 0; i < picked.size(); ++i) session.return_kept(*picked[i], calls[i].turn);
  EXPECT_EQ(session.kept_bodies(), GatewaySession::kKeptBodies);
  const std::string next = body_of(json(all.begin(), all.begin() + 8)).dump();
  KeptRequest& kept = session.kept_request_for(next);
  expect_same(incremental(next, kept), whole(next), next);
  EXPECT_EQ(kept.last_repeated(), 6u);
}

}  // namespace
}  // namespace crl::server::gateway
