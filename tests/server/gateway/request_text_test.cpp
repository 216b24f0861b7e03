// How the three APIs' requests become the session's message texts: lists of text parts and blocks joined as
// vLLM's servers join them for a chat template that takes text ("\n" between parts; an Anthropic system
// prompt's blocks by ""), and Claude Code's attribution line (x-anthropic-billing-header, a per-call hash)
// left out of the system prompt. Anthropic's mid-conversation system messages stand where they were sent.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/gateway/anthropic_codec.h"
#include "server/gateway/openai_codec.h"
#include "server/gateway/responses_codec.h"

namespace crl::server::gateway {
namespace {

using nlohmann::json;

json parts(std::initializer_list<const char*> texts, const char* type = "text") {
  json out = json::array();
  for (const char* text : texts) out.push_back({{"type", type}, {"text", text}});
  return out;
}

TEST(RequestText, ChatAndResponsesPartsAreJoinedByNewlines) {
  const ChatRequest chat =
      parse_chat_request(json{{"messages",
                               {{{"role", "system"}, {"content", parts({"s1", "s2"})}},
                                {{"role", "user"}, {"content", parts({"a", "", "b"})}},
                                {{"role", "tool"}, {"tool_call_id", "c"}, {"content", parts({"r1", "r2"})}}}}}
                             .dump());
  ASSERT_EQ(chat.turn.messages.size(), 3u);
  EXPECT_EQ(chat.turn.messages[0].content, "s1\ns2");
  EXPECT_EQ(chat.turn.messages[1].content, "a\n\nb") << "every part, an empty one too (vLLM's join)";
  EXPECT_EQ(chat.turn.messages[2].content, "r1\nr2");
  EXPECT_EQ(parse_chat_request(json{{"messages", {{{"role", "user"}, {"content", "one string"}}}}}.dump())
                .turn.messages[0]
                .content,
            "one string");

  const ResponsesRequest responses = parse_responses_request(json{
      {"input",
       {{{"role", "user"}, {"content", parts({"x", "y"}, "input_text")}},
        {{"type", "function_call_output"}, {"call_id", "c"}, {"output", parts({"o1", "o2"}, "input_text")}}}}}
                                                                 .dump());
  ASSERT_EQ(responses.turn.messages.size(), 2u);
  EXPECT_EQ(responses.turn.messages[0].content, "x\ny");
  EXPECT_EQ(responses.turn.messages[1].content, "o1\no2");
}

TEST(RequestText, AnthropicBlocksSystemMessagesAndTheAttributionLine) {
  const auto messages_of = [](const json& body) {
    json full = body;
    full["max_tokens"] = 16;
    return parse_messages_request(full.dump(), false).turn.messages;
  };
  const json billing = {
      {"type", "text"},
      {"text", "x-anthropic-billing-header: cc_version=2.1.200.a1b; cc_entrypoint=cli; cch=93a1;"}};
  const json user = {{"role", "user"}, {"content", "go"}};
  // The system prompt's blocks joined by "", the attribution block left out.
  json system = parts({"You are Claude Code.", "\nBe brief."});
  system.insert(system.begin(), billing);
  std::vector<Message> out = messages_of({{"system", system}, {"messages", {user}}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].role, MessageRole::kSystem);
  EXPECT_EQ(out[0].content, "You are Claude Code.\nBe brief.");
  // A system string that starts with the line: its first line left out; the line alone: no system message.
  out = messages_of(
      {{"system", "x-anthropic-billing-header: cch=1;\nYou are Claude Code."}, {"messages", {user}}});
  EXPECT_EQ(out[0].content, "You are Claude Code.");
  out = messages_of({{"system", json::array({billing})}, {"messages", {user}}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].role, MessageRole::kUser);
  // A block that holds more than the line: the rest of it is kept.
  out = messages_of(
      {{"system", json::array({{{"type", "text"},
                                {"text", "x-anthropic-billing-header: cch=2;\nYou are Claude Code."}}})},
       {"messages", {user}}});
  EXPECT_EQ(out[0].content, "You are Claude Code.");
  // Not the attribution line: kept as written, anywhere but at a block's start.
  out = messages_of({{"system", "Mind the x-anthropic-billing-header."}, {"messages", {user}}});
  EXPECT_EQ(out[0].content, "Mind the x-anthropic-billing-header.");

  // A user turn's text blocks joined by "\n" (empty ones skipped), its tool_result blocks as tool messages in
  // block order, a tool_result's text blocks joined by "\n"; a mid-conversation system message where it
  // stands.
  out = messages_of(
      {{"messages",
        {{{"role", "user"}, {"content", parts({"<system-reminder>r</system-reminder>", "", "do it"})}},
         {{"role", "assistant"},
          {"content",
           {{{"type", "text"}, {"text", "ok"}},
            {{"type", "tool_use"}, {"id", "t1"}, {"name", "run"}, {"input", json::object()}}}}},
         {{"role", "user"},
          {"content", {{{"type", "tool_result"}, {"tool_use_id", "t1"}, {"content", parts({"l1", "l2"})}}}}},
         {{"role", "system"}, {"content", parts({"<system-reminder>changed</system-reminder>"})}},
         {{"role", "system"}, {"content", json::array({billing})}}}}});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].content, "<system-reminder>r</system-reminder>\ndo it");
  EXPECT_EQ(out[1].role, MessageRole::kAssistant);
  EXPECT_EQ(out[1].content, "ok");
  EXPECT_EQ(out[2].role, MessageRole::kTool);
  EXPECT_EQ(out[2].content, "l1\nl2");
  EXPECT_EQ(out[3].role, MessageRole::kSystem);
  EXPECT_EQ(out[3].content, "<system-reminder>changed</system-reminder>");
}

}  // namespace
}  // namespace crl::server::gateway
