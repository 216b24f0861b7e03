// What a streamed call shows of its answer while it is sampled (server/gateway/live_reply.h): always a
// prefix of the reply the whole answer is read into, in every tool-call format and reasoning format, for any
// split of the sampled bytes; and, for the common answers, most of the text before the answer ends.
#include "server/gateway/live_reply.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/utf8.h"
#include "server/gateway/sampled_reply.h"

namespace crl::server::gateway {
namespace {

// The reply the session reads from the whole answer (gateway_session.cpp drive): repaired UTF-8, less a
// stop string it ends with, then read.
AssistantReply whole_reply(const std::string& bytes, const LiveRules& rules) {
  std::string text = valid_utf8(bytes);
  for (const std::string& stop : rules.stop) {
    if (!stop.empty() && text.ends_with(stop)) {
      text.resize(text.size() - stop.size());
      break;
    }
  }
  if (rules.plain) return AssistantReply{text, {}, {}};
  return read_sampled_reply(text, rules.tool_format, rules.reasoning, rules.choice, nullptr, "x");
}

struct Shown {
  std::string reasoning, content;
};

// Feeds `bytes` in pieces cut at `cuts`; checks after each that what was shown is a prefix of the whole
// reply's reasoning and content. Returns what was shown before the last piece came.
Shown check_prefixes(const std::string& bytes, const std::vector<size_t>& cuts, const LiveRules& rules) {
  const AssistantReply reply = whole_reply(bytes, rules);
  LiveReply live(rules);
  Shown shown, before_last;
  size_t from = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t to = i < cuts.size() ? cuts[i] : bytes.size();
    if (i == cuts.size()) before_last = shown;
    std::string reasoning, content;
    live.add(std::string_view(bytes).substr(from, to - from), reasoning, content);
    shown.reasoning += reasoning;
    shown.content += content;
    EXPECT_EQ(shown.reasoning, live.reasoning());
    EXPECT_EQ(shown.content, live.content());
    EXPECT_TRUE(reply.reasoning.starts_with(shown.reasoning))
        << "text " << ::testing::PrintToString(bytes) << " shown reasoning "
        << ::testing::PrintToString(shown.reasoning) << " whole "
        << ::testing::PrintToString(reply.reasoning);
    EXPECT_TRUE(reply.content.starts_with(shown.content))
        << "text " << ::testing::PrintToString(bytes) << " shown content "
        << ::testing::PrintToString(shown.content) << " whole " << ::testing::PrintToString(reply.content)
        << " format " << tool_call_format_name(rules.tool_format) << " thinking "
        << (rules.reasoning == ReasoningFormat::kThink);
    if (!reply.content.starts_with(shown.content) || !reply.reasoning.starts_with(shown.reasoning)) break;
    from = to;
  }
  return before_last;
}

Shown fed_byte_by_byte(const std::string& bytes, const LiveRules& rules) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < bytes.size(); ++i) cuts.push_back(i);
  return check_prefixes(bytes, cuts, rules);
}

LiveRules rules_for(ToolCallFormat format, ReasoningFormat reasoning) {
  LiveRules rules;
  rules.tool_format = format;
  rules.reasoning = reasoning;
  return rules;
}

TEST(LiveReply, ShowsTheContentBeforeAToolCallAsItIsSampled) {
  const std::string text =
      "I will list the files.\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {}}\n</tool_call>";
  const Shown shown = fed_byte_by_byte(text, rules_for(ToolCallFormat::kHermes, ReasoningFormat::kNone));
  EXPECT_EQ(shown.content, "I will list the files.");
}

TEST(LiveReply, ShowsTheReasoningThenTheContent) {
  const std::string text = "<think>\nThe user wants a list.\n</think>\n\nHere it is: a, b.";
  const LiveRules rules = rules_for(ToolCallFormat::kHermes, ReasoningFormat::kThink);
  const Shown shown = fed_byte_by_byte(text, rules);
  EXPECT_EQ(shown.reasoning, "The user wants a list.");
  EXPECT_EQ(shown.content, "Here it is: a, b");
}

TEST(LiveReply, WaitsWhereTheTextDoesNotYetDecide) {
  const LiveRules think = rules_for(ToolCallFormat::kHermes, ReasoningFormat::kThink);
  // A template that opened <think> in the prompt: reasoning or content is decided by "</think>" only.
  EXPECT_EQ(fed_byte_by_byte("plain words without tags", think).content, "");
  EXPECT_EQ(fed_byte_by_byte("thought</think>answer here", think).reasoning, "thought");
  // llama3_json: an answer that opens a JSON object may be a call: nothing until it is whole.
  const LiveRules llama = rules_for(ToolCallFormat::kLlama3Json, ReasoningFormat::kNone);
  EXPECT_EQ(fed_byte_by_byte(R"({"name": "ls", "parameters": {}})", llama).content, "");
  EXPECT_EQ(fed_byte_by_byte("Just text, no call.", llama).content, "Just text, no call");
  // A stop string's beginning waits for what follows it.
  LiveRules stop = rules_for(ToolCallFormat::kHermes, ReasoningFormat::kNone);
  stop.stop = {"\nObservation:"};
  EXPECT_EQ(fed_byte_by_byte("run ls\nObservation:", stop).content, "run ls");
  // A character's bytes wait for the whole character: never a U+FFFD for a split one.
  EXPECT_EQ(
      fed_byte_by_byte("caf\xC3\xA9 ok", rules_for(ToolCallFormat::kHermes, ReasoningFormat::kNone)).content,
      "caf\xC3\xA9 o");
}

TEST(LiveReply, HarmonyAndForcedCallsAreNeverShownLive) {
  EXPECT_EQ(fed_byte_by_byte("<|channel|>final<|message|>hello there",
                             rules_for(ToolCallFormat::kHarmony, ReasoningFormat::kNone))
                .content,
            "");
  LiveRules forced = rules_for(ToolCallFormat::kHermes, ReasoningFormat::kNone);
  forced.choice.mode = ToolChoiceMode::kRequired;
  EXPECT_EQ(fed_byte_by_byte(R"([{"name": "ls", "parameters": {}}] and more)", forced).content, "");
}

TEST(LiveReply, APlainCompletionShowsItsTextAsSampled) {
  LiveRules plain;
  plain.plain = true;
  EXPECT_EQ(fed_byte_by_byte("def f():\n    return 1\n\n", plain).content, "def f():\n    return 1\n");
}

// Every split of random answers built from the pieces the formats are made of: what is shown is always a
// prefix of the whole reply.
TEST(LiveReply, WhatIsShownIsAlwaysAPrefixOfTheWholeReply) {
  const std::vector<std::string> pieces = {
      "a",
      "b c",
      " ",
      "\n",
      "\n\n",
      "<think>",
      "</think>",
      "</th",
      "<tool_call>",
      "</tool_call>",
      "{\"name\": \"f\", \"arguments\": {}}",
      "{\"name\": \"g\", \"parameters\": {\"x\": 1}}",
      ";",
      "<|python_tag|>",
      "[f(x=1)]",
      "<｜tool▁calls▁begin｜>",
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>",
      "<｜tool▁calls▁end｜>",
      "<function=f>\n<parameter=x>\n1\n</parameter>\n</function>",
      "\xC3",
      "\xA9",
      "\xE2\x82",
      "\xAC",
      "\xFF",
      "STOP",
      "ST",
      "{",
      "[",
      "<"};
  std::mt19937 rng(20261208);
  const ToolCallFormat formats[] = {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                                    ToolCallFormat::kDeepSeekV3, ToolCallFormat::kQwen3Coder,
                                    ToolCallFormat::kPythonic};
  int checked = 0, showed = 0;
  for (int round = 0; round < 600; ++round) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 9);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i) {
      if (rng() % 3 == 0) cuts.push_back(i);
    }
    for (const ToolCallFormat format : formats) {
      for (const ReasoningFormat reasoning : {ReasoningFormat::kNone, ReasoningFormat::kThink}) {
        for (const ToolChoiceMode mode : {ToolChoiceMode::kAuto, ToolChoiceMode::kNone}) {
          LiveRules rules = rules_for(format, reasoning);
          rules.choice.mode = mode;
          if (round % 2 == 0) rules.stop = {"STOP"};
          const Shown shown = check_prefixes(text, cuts, rules);
          if (!shown.content.empty() || !shown.reasoning.empty()) ++showed;
          ++checked;
        }
      }
    }
    LiveRules plain;
    plain.plain = true;
    plain.stop = {"STOP"};
    check_prefixes(text, cuts, plain);
  }
  EXPECT_EQ(checked, 600 * 5 * 2 * 2);
  EXPECT_GT(showed, checked / 4) << "most answers show something before they end";
}

}  // namespace
}  // namespace crl::server::gateway
