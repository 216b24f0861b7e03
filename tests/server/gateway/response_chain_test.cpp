// The Responses API's chain of a session's responses (server/gateway/response_chain.h) alone: what a chained
// call's turn holds, what a stateless call copies, cuts at earlier responses, failed calls, and the bound.
#include "server/gateway/response_chain.h"

#include <gtest/gtest.h>

#include "server/gateway/gateway_error.h"

namespace crl::server::gateway {
namespace {

Message chain_user(std::string text) {
  return Message{MessageRole::kUser, std::move(text), {}, {}};
}
Message chain_system(std::string text) {
  return Message{MessageRole::kSystem, std::move(text), {}, {}};
}
AssistantReply chain_reply(std::string text) {
  return AssistantReply{std::move(text), {}, ""};
}

ChatTurn chain_turn(std::vector<Message> messages) {
  ChatTurn turn;
  turn.messages = std::move(messages);
  return turn;
}

std::vector<std::string> contents(const ChatTurn& turn) {
  std::vector<std::string> out;
  for (const Message& m : turn.messages) out.push_back(m.content);
  return out;
}

// The error a chained call gets (empty when it gets none).
std::string refusal(ResponseChain& chain, const std::string& previous) {
  ChatTurn turn = chain_turn({chain_user("next")});
  try {
    chain.continue_from(previous, 0, turn);
    chain.take_back(turn);
  } catch (const GatewayError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.code(), "previous_response_not_found");
    EXPECT_EQ(e.param(), "previous_response_id");
    return e.what();
  }
  return "";
}

TEST(ResponseChain, AChainedTurnHoldsTheConversationBeforeItsInputAndAfterItsInstructions) {
  ResponseChain chain;
  ChatTurn first = chain_turn({chain_system("be brief"), chain_user("u1")});
  chain.record("resp_a", 1, first, chain_reply("a1"));
  EXPECT_EQ(chain.messages(), 2u) << "the instructions are not part of the line";
  ChatTurn second = chain_turn({chain_system("be terse"), chain_user("u2")});
  chain.continue_from("resp_a", 1, second);
  EXPECT_EQ(contents(second), (std::vector<std::string>{"be terse", "u1", "a1", "u2"}));
  ASSERT_EQ(second.keys.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(second.keys[i], message_key(second.messages[i])) << i;
  EXPECT_EQ(second.messages[2].role, MessageRole::kAssistant);
  chain.record("resp_b", 1, second, chain_reply("a2"));
  EXPECT_EQ(chain.messages(), 4u);
  EXPECT_EQ(chain.points(), 2u);
  ChatTurn third = chain_turn({chain_user("u3")});
  chain.continue_from("resp_b", 0, third);
  EXPECT_EQ(contents(third), (std::vector<std::string>{"u1", "a1", "u2", "a2", "u3"}));
  chain.take_back(third);
}

TEST(ResponseChain, AFailedChainedCallLeavesTheLineAsItWas) {
  ResponseChain chain;
  ChatTurn first = chain_turn({chain_user("u1")});
  chain.record("resp_a", 0, first, chain_reply("a1"));
  ChatTurn second = chain_turn({chain_user("u2")});
  chain.continue_from("resp_a", 0, second);
  chain.take_back(second);  // the call failed
  ChatTurn again = chain_turn({chain_user("u2")});
  chain.continue_from("resp_a", 0, again);
  EXPECT_EQ(contents(again), (std::vector<std::string>{"u1", "a1", "u2"}));
  chain.take_back(again);
  chain.take_back(again);  // nothing lent: nothing happens
  EXPECT_EQ(chain.messages(), 2u);
}

TEST(ResponseChain, UnknownResponsesAreRefusedSayingWhy) {
  ResponseChain chain;
  EXPECT_NE(refusal(chain, "resp_x").find("has answered no response yet"), std::string::npos);
  ChatTurn first = chain_turn({chain_user("u1")});
  chain.record("resp_a", 0, first, chain_reply("a1"));
  const std::string why = refusal(chain, "resp_x");
  EXPECT_NE(why.find("'resp_x'"), std::string::npos) << why;
  EXPECT_NE(why.find("newest response is \"resp_a\""), std::string::npos) << why;
  EXPECT_EQ(refusal(chain, "resp_a"), "");
}

TEST(ResponseChain, ContinuingAnEarlierResponseCutsTheLineThere) {
  ResponseChain chain;
  ChatTurn first = chain_turn({chain_user("u1")});
  chain.record("resp_a", 0, first, chain_reply("a1"));
  ChatTurn second = chain_turn({chain_user("u2")});
  chain.continue_from("resp_a", 0, second);
  chain.record("resp_b", 0, second, chain_reply("a2"));
  ChatTurn branch = chain_turn({chain_user("other")});
  chain.continue_from("resp_a", 0, branch);
  EXPECT_EQ(contents(branch), (std::vector<std::string>{"u1", "a1", "other"}));
  chain.record("resp_c", 0, branch, chain_reply("a3"));
  EXPECT_EQ(chain.points(), 2u);
  EXPECT_NE(refusal(chain, "resp_b"), "") << "the response after the cut is gone";
  EXPECT_EQ(refusal(chain, "resp_a"), "");
  EXPECT_EQ(refusal(chain, "resp_c"), "");
}

TEST(ResponseChain, AStatelessCallCopiesOnlyWhatItAddsAndARetryNothing) {
  ResponseChain chain;
  ChatTurn first = chain_turn({chain_system("sys"), chain_user("u1")});
  chain.record("resp_a", 1, first, chain_reply("a1"));
  // The harness's copy of the answer, then its next words: the line's two messages repeat.
  ChatTurn second = chain_turn({chain_system("sys"), chain_user("u1"),
                                Message{MessageRole::kAssistant, "a1", {}, {}}, chain_user("u2")});
  chain.record("resp_b", 1, second, chain_reply("a2"));
  EXPECT_EQ(chain.messages(), 4u);
  EXPECT_EQ(chain.points(), 2u);
  chain.record("resp_b", 1, second, chain_reply("a2"));  // a retry answered with the held answer
  EXPECT_EQ(chain.messages(), 4u);
  EXPECT_EQ(chain.points(), 2u);
  // An edited history: the line follows it; the responses past the edit are gone.
  ChatTurn edited = chain_turn({chain_user("u1 again")});
  chain.record("resp_c", 0, edited, chain_reply("a3"));
  EXPECT_EQ(chain.messages(), 2u);
  EXPECT_EQ(chain.points(), 1u);
  ChatTurn next = chain_turn({chain_user("u4")});
  chain.continue_from("resp_c", 0, next);
  EXPECT_EQ(contents(next), (std::vector<std::string>{"u1 again", "a3", "u4"}));
  chain.take_back(next);
}

TEST(ResponseChain, ALinePastTheBoundIsDroppedAndAChainedCallIsToldWhy) {
  ResponseChain chain;
  ChatTurn big = chain_turn({chain_user(std::string(ResponseChain::kMaxBytes, 'x'))});
  chain.record("resp_big", 0, big, chain_reply("a1"));
  EXPECT_EQ(chain.messages(), 0u);
  EXPECT_EQ(chain.bytes(), 0u);
  const std::string why = refusal(chain, "resp_big");
  EXPECT_NE(why.find("passed 16 MiB"), std::string::npos) << why;
  EXPECT_NE(why.find("send the whole conversation"), std::string::npos) << why;
  // A stateless call starts a new line.
  ChatTurn small = chain_turn({chain_user("u1")});
  chain.record("resp_small", 0, small, chain_reply("a1"));
  EXPECT_EQ(refusal(chain, "resp_small"), "");
}

}  // namespace
}  // namespace crl::server::gateway
