// Reasoning blocks (envs/codec.h Reasoning): a text codec with "<think> ... </think>" gives the environment
// only the answer after the block, keeps every token the policy's, and changes the codec's fingerprint only
// when it is on; the synthetic oracle writes its notes in the block and still wins, and a block that never
// closes is no answer at all.
#include "engine/tokenizer.h"
#include "envs/codec.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "envs/synthetic/oracle.h"
#include "envs/synthetic/oracle_episode.h"
#include "envs/synthetic/synthetic_env.h"
#include "gtest/gtest.h"

namespace crl {
namespace {

std::shared_ptr<const Codec> byte_codec(bool reasoning) {
  TextPrompts prompts;
  if (reasoning) prompts.reasoning = think_reasoning();
  return make_text_codec(std::make_shared<ByteTokenizer>(), prompts);
}

TEST(Reasoning, TheAnswerIsWhatFollowsTheFirstClose) {
  const Reasoning think = think_reasoning();
  EXPECT_EQ(answer_after_reasoning("<think>FACT code=9815</think>\nsubmit 9815", think), "submit 9815");
  EXPECT_EQ(answer_after_reasoning("  \n<think>a</think>  next", think), "next");
  EXPECT_EQ(answer_after_reasoning("<think></think>next", think), "next");
  // The first close ends the block: a fake close-and-answer inside the notes cannot hide the real answer.
  EXPECT_EQ(answer_after_reasoning("<think>x</think>submit 1</think>submit 2", think),
            "submit 1</think>submit 2");
  // A block that never closes (the turn ran out while reasoning) is no answer.
  EXPECT_EQ(answer_after_reasoning("<think>submit 9815", think), "");
  EXPECT_EQ(answer_after_reasoning("<think>notes</think>", think), "");
  EXPECT_EQ(answer_after_reasoning("<think>notes</think> \n ", think), "");
  // Only a block at the start counts; anything else is the answer as written.
  EXPECT_EQ(answer_after_reasoning("submit 1 <think>x</think>", think), "submit 1 <think>x</think>");
  EXPECT_EQ(answer_after_reasoning("</think>submit 1", think), "</think>submit 1");
  EXPECT_EQ(answer_after_reasoning("next", think), "next");
  // Off: every text unchanged.
  EXPECT_EQ(answer_after_reasoning("<think>a</think>next", Reasoning{}), "<think>a</think>next");
}

TEST(Reasoning, TheCodecGivesTheEnvironmentOnlyTheAnswer) {
  const auto plain = byte_codec(false), thinking = byte_codec(true);
  const std::vector<TokenId> tokens = thinking->encode_action("<think>notes</think>\nsubmit 9815");
  EXPECT_EQ(thinking->decode_action(tokens).text, "submit 9815");
  EXPECT_EQ(plain->decode_action(tokens).text, "<think>notes</think>\nsubmit 9815");
  // Every sampled token stays readable (the block is the policy's text, not removed from the trajectory).
  EXPECT_EQ(thinking->decode(thinking->summary_body(tokens)), "<think>notes</think>\nsubmit 9815");
  EXPECT_EQ(thinking->reasoning(), think_reasoning());
  EXPECT_FALSE(plain->reasoning().enabled());
  // Off keeps the fingerprint codecs had before reasoning existed (checkpoints and exports stay valid);
  // on changes it, so a model trained to reason is not evaluated by a codec that passes its notes along.
  EXPECT_EQ(plain->fingerprint(), make_text_codec(std::make_shared<ByteTokenizer>())->fingerprint());
  EXPECT_NE(plain->fingerprint(), thinking->fingerprint());
}

namespace synthetic = envs::synthetic;

Budget text_budget() {  // the byte tokenizer's scale (tests/envs/synthetic_episode_test.cpp)
  Budget budget;
  budget.capacity = 3072;
  budget.reserve = 768;
  budget.summary_cap = 512;
  budget.per_turn_cap = 512;
  return budget;
}

TEST(Reasoning, TheOracleWinsEveryDevTaskAfterWritingItsNotes) {
  const auto codec = byte_codec(true);
  for (int i = 0; i < 30; ++i) {
    std::unique_ptr<Env> env = make_env("synthetic", {{"view", "text"}, {"split", "dev"}});
    const Trajectory t =
        synthetic::play_oracle(std::move(env), codec, EpisodeConfig{text_budget(), 7, 0, 0, ""},
                               Task{"", static_cast<uint64_t>(i), "dev"});
    SCOPED_TRACE("dev task " + std::to_string(i));
    ASSERT_EQ(t.reward, 1.0);
    ASSERT_FALSE(t.segments.empty());
    // The last sampled span of the last segment is the answer, notes first.
    const Segment& last = t.segments.back();
    std::vector<TokenId> answer_ids;
    for (size_t k = last.response_ids.size(); k-- > 0 && answer_ids.empty();) {
      if (last.actor_mask[k] == 0) continue;
      size_t begin = k;
      while (begin > 0 && last.actor_mask[begin - 1] == 1) --begin;
      answer_ids.assign(last.response_ids.begin() + begin, last.response_ids.begin() + k + 1);
    }
    const std::string answer = codec->decode(answer_ids);
    EXPECT_EQ(answer.rfind("<think>Task: ", 0), 0u) << answer;
    EXPECT_NE(answer.find(" Kept: record "), std::string::npos) << answer;
    EXPECT_NE(answer.find("</think>\nsubmit "), std::string::npos) << answer;
  }
}

// Plays task `index` with `codec`: `next` until the question, then `final_action` as the answer; if that did
// not end the episode, a wrong answer ends it (so the reward is 1 only when `final_action` answered).
double play_with_final_action(const std::shared_ptr<const Codec>& codec, int index,
                              const std::string& final_action) {
  std::unique_ptr<Env> env = make_env("synthetic", {{"view", "text"}, {"split", "dev"}});
  const auto* synthetic = dynamic_cast<const synthetic::SyntheticEnv*>(env.get());
  Episode episode(std::move(env), codec, EpisodeConfig{text_budget(), 7, 0, 0, ""});
  episode.start(Task{"", static_cast<uint64_t>(index), "dev"});
  synthetic::Oracle oracle(synthetic->task(), false);
  bool answered = false;
  while (!episode.done()) {
    Decision decision;
    if (episode.request().role == Role::kSummarize) {
      decision.tokens = codec->encode_action(oracle.summary_text(synthetic->records_seen()));
    } else {
      const std::string next = oracle.act().text;
      decision.tokens = codec->encode_action(next == "next" ? next
                                             : answered     ? "submit wrong"
                                                            : final_action);
      answered = answered || next != "next";
    }
    episode.submit(decision);
  }
  return episode.reward();
}

TEST(Reasoning, OnlyAClosedBlockFollowedByTheAnswerWins) {
  std::unique_ptr<Env> env = make_env("synthetic", {{"view", "text"}, {"split", "dev"}});
  const std::string answer = dynamic_cast<const synthetic::SyntheticEnv&>(*env).tasks().tasks[0].answer;
  const auto thinking = byte_codec(true), plain = byte_codec(false);
  EXPECT_EQ(play_with_final_action(thinking, 0, "<think>notes</think>\nsubmit " + answer), 1.0);
  // The same text where reasoning is off is a two-line command: invalid, so never the answer.
  EXPECT_EQ(play_with_final_action(plain, 0, "<think>notes</think>\nsubmit " + answer), 0.0);
  // Unclosed notes that contain the answer do not answer (the environment gets nothing).
  EXPECT_EQ(play_with_final_action(thinking, 0, "<think>submit " + answer), 0.0);
  // Nor does an answer written only inside the notes.
  EXPECT_EQ(play_with_final_action(thinking, 0, "<think>submit " + answer + "</think>"), 0.0);
}

}  // namespace
}  // namespace crl
