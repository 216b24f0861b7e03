// The Responses API's chain of a session's responses (server/gateway/response_chain.h) alone: what a chained
// call's turn holds, what a stateless call copies, cuts at earlier responses, failed calls, and the bound.
#include "server/gateway/response_chain.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

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

// Two conversations' first responses: resp_a0 ("task A", answered "a0") and resp_b0 ("task B", "b0").
void start_two_conversations(ResponseChain& chain) {
  ChatTurn a = chain_turn({chain_user("task A")});
  chain.record("resp_a0", 0, a, chain_reply("a0"));
  ChatTurn b = chain_turn({chain_user("task B")});
  chain.record("resp_b0", 0, b, chain_reply("b0"));
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
  // A history edited after its first two messages: the line follows it; the responses past the edit are
  // gone.
  ChatTurn edited_late =
      chain_turn({chain_system("sys"), chain_user("u1"), Message{MessageRole::kAssistant, "a1", {}, {}},
                  chain_user("u2 edited")});
  chain.record("resp_e", 1, edited_late, chain_reply("a2"));
  EXPECT_EQ(chain.lines(), 1u);
  EXPECT_EQ(chain.points(), 2u) << "resp_a and resp_e";
  EXPECT_NE(refusal(chain, "resp_b"), "") << "the response past the edit is gone";
  EXPECT_EQ(refusal(chain, "resp_a"), "") << "the one before it stays";
  // Another first message: another conversation, on its own line; the first one's responses stay.
  ChatTurn edited = chain_turn({chain_user("u1 again")});
  chain.record("resp_c", 0, edited, chain_reply("a3"));
  EXPECT_EQ(chain.messages(), 2u);
  EXPECT_EQ(chain.points(), 1u);
  EXPECT_EQ(chain.lines(), 2u);
  EXPECT_EQ(refusal(chain, "resp_e"), "");
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

// Thousands of random calls against a reference that keeps every response's whole conversation (the API's
// own model: a tree of responses): whenever the chain continues a response, the turn holds that response's
// conversation exactly; the newest response can always be continued, and so can the one a chained call
// followed; a failed call changes nothing.
TEST(ResponseChain, RandomCallsContinueExactlyTheConversationsTheyName) {
  std::mt19937_64 rng(20261206);
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  ResponseChain chain;
  std::map<std::string, std::vector<Message>> conversations;  // the reference: every response's
  std::vector<std::string> ids;                               // in the order they were answered
  std::string newest;
  int answered = 0, chained = 0, refused = 0;
  const auto words = [&] { return "w" + std::to_string(pick(4)); };  // few words: repeats happen
  for (int step = 0; step < 4000; ++step) {
    const size_t lead = pick(2);
    std::vector<Message> turn_messages;
    if (lead) turn_messages.push_back(chain_system("instructions " + words()));
    std::vector<Message> input;
    for (size_t k = 0, n = 1 + pick(2); k < n; ++k) input.push_back(chain_user(words()));
    const size_t kind = pick(12);
    std::vector<Message> expected;  // the conversation after the lead
    ChatTurn turn;
    std::string previous;
    if (kind < 9 && !ids.empty()) {  // chained: mostly the newest, else a recent one, any one, or none
      const size_t recent = ids.size() - 1 - pick(std::min<size_t>(6, ids.size()));
      previous = kind < 5   ? newest
                 : kind < 7 ? ids[recent]
                 : kind < 8 ? ids[pick(ids.size())]
                            : "resp_unknown" + words();
      turn = chain_turn(turn_messages);
      turn.messages.insert(turn.messages.end(), input.begin(), input.end());
      try {
        chain.continue_from(previous, lead, turn);
      } catch (const GatewayError&) {
        ++refused;
        EXPECT_NE(previous, newest) << "the newest response can always be continued (step " << step << ")";
        continue;
      }
      ++chained;
      ASSERT_TRUE(conversations.count(previous)) << "continued a response never answered: " << previous;
      expected = conversations[previous];
      expected.insert(expected.end(), input.begin(), input.end());
    } else {  // stateless: a prefix of some answered conversation (or none), then new words
      if (!ids.empty() && pick(3)) {
        const std::vector<Message>& base = conversations[ids[pick(ids.size())]];
        expected.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(pick(base.size() + 1)));
      }
      expected.insert(expected.end(), input.begin(), input.end());
      turn = chain_turn(turn_messages);
      turn.messages.insert(turn.messages.end(), expected.begin(), expected.end());
    }
    std::vector<Message> after_lead(turn.messages.begin() + static_cast<std::ptrdiff_t>(lead),
                                    turn.messages.end());
    ASSERT_EQ(after_lead, expected) << "step " << step;
    if (lead) {
      EXPECT_EQ(turn.messages[0], turn_messages[0]) << "the call's own instructions lead";
    }
    if (!previous.empty() && pick(8) == 0) {  // the upstream failed: the line is as it was
      chain.take_back(turn);
      ChatTurn again = chain_turn({chain_user("probe")});
      chain.continue_from(previous, 0, again);
      EXPECT_EQ(again.messages.size(), conversations[previous].size() + 1) << "step " << step;
      chain.take_back(again);
      continue;
    }
    const std::string id = "resp_" + std::to_string(answered++);
    const AssistantReply reply = chain_reply("a" + std::to_string(pick(3)));
    chain.record(id, lead, turn, reply);
    expected.push_back(Message{MessageRole::kAssistant, reply.content, {}, {}});
    conversations[id] = expected;
    ids.push_back(id);
    if (!previous.empty()) {  // a chained call: the response it followed is still there
      ChatTurn back = chain_turn({chain_user("probe")});
      chain.continue_from(previous, 0, back);
      chain.take_back(back);
    }
    newest = id;
  }
  EXPECT_GT(chained, 1000);
  EXPECT_GT(refused, 50);
}

// Two conversations interleaved in one session (a harness's sub-agents), each chaining its calls: each
// continues its own conversation exactly; past kMaxLines conversations the least recently used one's
// responses are gone (refused, saying why), the others' stay.
TEST(ResponseChain, InterleavedConversationsEachChainTheirOwn) {
  ResponseChain chain;
  start_two_conversations(chain);
  std::string last_a = "resp_a0", last_b = "resp_b0";
  for (int i = 1; i < 6; ++i) {
    ChatTurn next_a = chain_turn({chain_user("more A " + std::to_string(i))});
    chain.continue_from(last_a, 0, next_a);
    EXPECT_EQ(next_a.messages.size(), static_cast<size_t>(2 * i + 1));
    EXPECT_EQ(next_a.messages[0].content, "task A");
    last_a = "resp_a" + std::to_string(i);
    chain.record(last_a, 0, next_a, chain_reply("a" + std::to_string(i)));
    ChatTurn next_b = chain_turn({chain_user("more B " + std::to_string(i))});
    chain.continue_from(last_b, 0, next_b);
    EXPECT_EQ(next_b.messages[0].content, "task B");
    EXPECT_EQ(next_b.messages[2 * i - 1].content, "b" + std::to_string(i - 1));
    last_b = "resp_b" + std::to_string(i);
    chain.record(last_b, 0, next_b, chain_reply("b" + std::to_string(i)));
  }
  EXPECT_EQ(chain.lines(), 2u);
  for (size_t k = 0; k < ResponseChain::kMaxLines - 1; ++k) {
    ChatTurn other = chain_turn({chain_user("side call " + std::to_string(k))});
    chain.record("resp_side" + std::to_string(k), 0, other, chain_reply("s"));
  }
  EXPECT_EQ(chain.lines(), ResponseChain::kMaxLines);
  const std::string why = refusal(chain, last_a);
  EXPECT_NE(why.find("16 conversations at most"), std::string::npos) << why;
  EXPECT_EQ(refusal(chain, last_b), "") << "the more recently used conversation stays";
}

// Calls of two conversations in flight at once (a session's threads wait for the upstream together) each
// hold their own loan: each comes back or is recorded on its own line, whatever the other does; a call that
// continues a line lent to another is told to wait for that loan (nothing borrowed), which ends when the
// line comes back; a lent line is never dropped, however many conversations come meanwhile.
// The loan a chained call is told to wait for (continue_from throws Lent), or null when it borrowed the line.
std::shared_ptr<FiberMutex> loan_waited_for(ResponseChain& chain, const std::string& previous,
                                            ChatTurn& turn) {
  try {
    chain.continue_from(previous, 0, turn);
  } catch (const ResponseChain::Lent& lent) {
    return lent.loan;
  }
  return nullptr;
}

TEST(ResponseChain, EachCallInFlightHoldsItsOwnLoan) {
  ResponseChain chain;
  start_two_conversations(chain);
  ChatTurn next_a = chain_turn({chain_user("more A")});
  chain.continue_from("resp_a0", 0, next_a);
  ChatTurn next_b = chain_turn({chain_user("more B")});
  chain.continue_from("resp_b0", 0, next_b);
  EXPECT_EQ(contents(next_a), (std::vector<std::string>{"task A", "a0", "more A"}));
  EXPECT_EQ(contents(next_b), (std::vector<std::string>{"task B", "b0", "more B"}));
  // A retry of A's call while A's first try is in flight: told to wait, nothing borrowed.
  ChatTurn retry = chain_turn({chain_user("more A")});
  const std::shared_ptr<FiberMutex> loan = loan_waited_for(chain, "resp_a0", retry);
  ASSERT_NE(loan, nullptr) << "a lent line was lent twice";
  EXPECT_EQ(contents(retry), (std::vector<std::string>{"more A"}));
  EXPECT_EQ(retry.borrowed.line, 0u);
  EXPECT_FALSE(loan->try_lock()) << "the loan is held while the line is out";
  // Many conversations meanwhile: the lent lines stay.
  for (size_t k = 0; k < 2 * ResponseChain::kMaxLines; ++k) {
    ChatTurn other = chain_turn({chain_user("side call " + std::to_string(k))});
    chain.record("resp_side" + std::to_string(k), 0, other, chain_reply("s"));
  }
  // B's call is answered, A's fails: B's line goes on, A's is as it was, and A's loan has ended.
  chain.record("resp_b1", 0, next_b, chain_reply("b1"));
  chain.take_back(next_a);
  EXPECT_TRUE(loan->try_lock()) << "the waiting call was not let go";
  ChatTurn again_a = chain_turn({chain_user("more A")});
  chain.continue_from("resp_a0", 0, again_a);
  EXPECT_EQ(contents(again_a), (std::vector<std::string>{"task A", "a0", "more A"}));
  chain.take_back(again_a);
  ChatTurn again_b = chain_turn({chain_user("last B")});
  chain.continue_from("resp_b1", 0, again_b);
  EXPECT_EQ(contents(again_b), (std::vector<std::string>{"task B", "b0", "more B", "b1", "last B"}));
  chain.take_back(again_b);
  // A session that ends with a loan out: the waiting calls are let go, the loan's return finds nothing.
  ChatTurn out = chain_turn({chain_user("late")});
  chain.continue_from("resp_b1", 0, out);
  ChatTurn waiting = chain_turn({chain_user("late")});
  const std::shared_ptr<FiberMutex> ended = loan_waited_for(chain, "resp_b1", waiting);
  ASSERT_NE(ended, nullptr);
  chain.clear();
  EXPECT_TRUE(ended->try_lock());
  chain.take_back(out);
  EXPECT_EQ(chain.lines(), 0u);
}

}  // namespace
}  // namespace crl::server::gateway
