// The per-session text of the prompt ids (server/gateway/prompt_ids_text.h): the request body written with
// it is byte for byte the one written from scratch, over many turns, compactions (rebuilt windows),
// summary requests with cut observations, and a context restarted in place (a new episode: same arena
// address, different tokens).
#include "server/gateway/prompt_ids_text.h"

#include <gtest/gtest.h>

#include <random>

#include "policies/llm/llm_api.h"

namespace crl::server::gateway {
namespace {

std::vector<TokenId> tokens(std::mt19937_64& rng, size_t n) {
  std::vector<TokenId> out(n);
  for (TokenId& id : out) id = static_cast<TokenId>(rng() % 50000);
  return out;
}

// A context template of random ids (turn header, summary instruction, resume prefix and suffix, marker).
ContextTemplate random_template(std::mt19937_64& rng) {
  return ContextTemplate{tokens(rng, 4), tokens(rng, 12), tokens(rng, 6), tokens(rng, 3), tokens(rng, 5)};
}

// The body as write_request writes it from the prompt's spans, and as it writes it with the cached text.
void expect_same_body(const PromptView& prompt, std::string_view ids_text) {
  for (const llm::ApiKind api : {llm::ApiKind::kSglang, llm::ApiKind::kOpenAi}) {
    llm::GenerateCall call;
    call.prompt = &prompt;
    call.max_new_tokens = 32;
    call.sampling_seed = 7;
    call.rid = "s/execute/1";
    llm::SamplingParams sampling;
    std::string full, cached;
    llm::write_request(api, call, sampling, full);
    call.prompt_ids_json = ids_text;
    llm::write_request(api, call, sampling, cached);
    ASSERT_EQ(cached, full);
    // What the gateway sends (upstream.cpp): the same bytes as three pieces, the id text not copied.
    llm::RequestParts parts;
    llm::write_request_parts(api, call, sampling, parts);
    ASSERT_EQ(parts.ids.data(), ids_text.data());
    ASSERT_EQ(parts.head + std::string(parts.ids) + parts.tail, full);
  }
}

TEST(PromptIdsText, BodiesAreIdenticalToTheFullEncodingAcrossCompactionsAndRestarts) {
  std::mt19937_64 rng(18);
  Budget budget{2048, 512, 2, 64, 256, 1000};
  const ContextTemplate tmpl = random_template(rng);
  Context context(budget, tmpl);
  PromptIdsText text;
  uint64_t generation = 1;
  size_t reused_calls = 0, compactions = 0, restarts = 0;
  ASSERT_TRUE(context.start(tokens(rng, 40), tokens(rng, 300)));
  PromptView prompt;
  for (int turn = 0; turn < 600; ++turn) {
    if (context.tokens() > budget.capacity - budget.reserve) {
      // A summary request (observations cut when over the limit), then the rebuilt window.
      PromptView summary;
      ASSERT_TRUE(context.summary_prompt(summary));
      expect_same_body(summary, text.text(summary, generation, context.compactions()));
      context.rebuild(tokens(rng, 1 + rng() % 200));
      ++compactions;
    }
    if (turn % 150 == 149) {
      // A new episode on the same context: the arena is truncated and refilled at the same address.
      ++generation;
      ASSERT_TRUE(context.start(tokens(rng, 40), tokens(rng, 300)));
      ++restarts;
    }
    context.execution_prompt(prompt);
    const std::string_view ids = text.text(prompt, generation, context.compactions());
    expect_same_body(prompt, ids);
    if (text.last_written() < static_cast<size_t>(prompt.size())) ++reused_calls;
    context.append_action(tokens(rng, 1 + rng() % 60), Provenance::kSampled);
    context.append_observation(tokens(rng, rng() % 400));
  }
  EXPECT_GE(compactions, 20u);
  EXPECT_EQ(restarts, 4u);
  EXPECT_GT(reused_calls, 400u);  // the cache did its job on most turns
}

// Without the generation bump, a restarted context's identical span layout would reuse stale text: the
// generation is what tells the two arenas' lives apart.
TEST(PromptIdsText, ANewGenerationIsNeverServedTheOldText) {
  std::mt19937_64 rng(5);
  Budget budget{2048, 512, 2, 64, 256, 10};
  const ContextTemplate tmpl = random_template(rng);
  Context context(budget, tmpl);
  PromptIdsText text;
  ASSERT_TRUE(context.start(tokens(rng, 40), tokens(rng, 300)));
  PromptView prompt;
  context.execution_prompt(prompt);
  const std::string first(text.text(prompt, 1, 0));
  ASSERT_TRUE(context.start(tokens(rng, 40), tokens(rng, 300)));  // same sizes: the same spans
  context.execution_prompt(prompt);
  const std::string second(text.text(prompt, 2, 0));
  EXPECT_NE(first, second);
  expect_same_body(prompt, second);
  EXPECT_EQ(text.last_written(), static_cast<size_t>(prompt.size()));
}

// The window's first action reallocates the arena's storage (every session's second call): the offsets
// stay, so only the new ids are written, and the text is still exact.
TEST(PromptIdsText, AMovedArenaWritesOnlyTheNewIds) {
  std::mt19937_64 rng(9);
  Budget budget{65536, 16384, 2, 1024, 1024, 8};
  Context context(budget, random_template(rng));
  PromptIdsText text;
  ASSERT_TRUE(context.start(tokens(rng, 40), tokens(rng, 300)));
  PromptView prompt;
  context.execution_prompt(prompt);
  const TokenId* before = prompt.tokens(prompt.spans()[0]).data();
  text.text(prompt, 1, 0);
  context.append_action(tokens(rng, 5000), Provenance::kSampled);  // past any slack: the storage moves
  context.append_observation(tokens(rng, 20));
  context.execution_prompt(prompt);
  ASSERT_NE(prompt.tokens(prompt.spans()[0]).data(), before)
      << "the arena did not move: the test tests nothing";
  const std::string_view ids = text.text(prompt, 1, 0);
  expect_same_body(prompt, ids);
  EXPECT_LT(text.last_written(), static_cast<size_t>(prompt.size()) - 300);
}

}  // namespace
}  // namespace crl::server::gateway
