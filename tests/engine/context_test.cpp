#include "engine/context.h"

#include <gtest/gtest.h>

#include "engine/error.h"

namespace crl {
namespace {

std::vector<TokenId> tokens(int n, TokenId value) {
  return std::vector<TokenId>(n, value);
}

// A template with recognisable ids: header 90, instruction 91 91, resume 92 | 93, marker 94.
ContextTemplate test_template() {
  return ContextTemplate{{90}, {91, 91}, {92}, {93}, {94}};
}

Budget budget(int64_t capacity, int64_t reserve, int tail_k = 2) {
  Budget b;
  b.capacity = capacity;
  b.reserve = reserve;
  b.tail_k = tail_k;
  b.per_turn_cap = std::min<int64_t>(8, reserve);
  b.summary_cap = std::min<int64_t>(8, reserve);
  return b;
}

TEST(Budget, ValidatesTheGuards) {
  EXPECT_NO_THROW(budget(100, 20).validate("b"));
  Budget b = budget(100, 20);
  b.reserve = 100;
  EXPECT_THROW(b.validate("b"), Error);
  b = budget(100, 20);
  b.per_turn_cap = 21;
  try {
    b.validate("scenario.pbtxt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "per_turn_cap");
    EXPECT_NE(std::string(e.what()).find("scenario.pbtxt"), std::string::npos);
  }
  b = budget(100, 20);
  b.tail_k = -1;
  EXPECT_THROW(b.validate("b"), Error);
}

TEST(Context, CountsTheNextRequestIncludingTheTurnHeader) {
  Context c(budget(100, 20), test_template());
  ASSERT_TRUE(c.start(tokens(5, 1), tokens(3, 2)));
  EXPECT_EQ(c.tokens(), 5 + 3 + 1);
  c.append_action(tokens(4, 3), Provenance::kSampled);
  c.append_observation(tokens(6, 4));
  EXPECT_EQ(c.tokens(), 9 + 4 + 6 + 1);
  const PromptView p = c.execution_prompt();
  EXPECT_EQ(p.size(), c.tokens());
  EXPECT_EQ(p.back(), 90);
  EXPECT_EQ(c.max_new_tokens(), 8);
}

TEST(Context, FirstPromptThatDoesNotFitFails) {
  Context c(budget(10, 4), test_template());
  EXPECT_FALSE(c.start(tokens(6, 1), tokens(3, 2)));  // 6 + 3 + header = 10 >= C
}

TEST(Context, TriggerIsStrictAndNeedsAnActionInTheWindow) {
  Context c(budget(40, 10), test_template());
  ASSERT_TRUE(c.start(tokens(25, 1), tokens(5, 2)));  // 31 tokens: remaining 9 < 10
  EXPECT_FALSE(c.needs_compaction()) << "guard (a): no action yet in this window";
  c.append_action(tokens(1, 3), Provenance::kSampled);
  EXPECT_TRUE(c.needs_compaction());
  Context d(budget(40, 10), test_template());
  ASSERT_TRUE(d.start(tokens(20, 1), tokens(2, 2)));
  d.append_action(tokens(7, 3), Provenance::kSampled);  // 20 + 2 + (1 + 7) + 1 = 31? remaining 9
  d.append_observation({});
  EXPECT_EQ(d.tokens(), 31);
  EXPECT_TRUE(d.needs_compaction());
  Context e(budget(40, 10), test_template());
  ASSERT_TRUE(e.start(tokens(20, 1), tokens(1, 2)));
  e.append_action(tokens(7, 3), Provenance::kSampled);  // 30 tokens: remaining exactly 10, not < 10
  EXPECT_EQ(e.tokens(), 30);
  EXPECT_FALSE(e.needs_compaction());
  e.request_compaction();
  EXPECT_TRUE(e.needs_compaction());
}

TEST(Context, RebuildKeepsSystemResumeAndTheNewestSteps) {
  Context c(budget(200, 20), test_template());
  ASSERT_TRUE(c.start(tokens(4, 1), tokens(2, 2)));
  for (int s = 0; s < 5; ++s) {
    c.append_action(tokens(3, 10 + s), Provenance::kSampled);
    c.append_observation(tokens(2, 20 + s));
  }
  const RebuildResult r = c.rebuild(tokens(3, 7));
  ASSERT_EQ(r.status, RebuildStatus::kRebuilt);
  EXPECT_EQ(r.kept_steps, 2);
  EXPECT_EQ(c.compactions(), 1);
  std::vector<TokenId> ids;
  std::vector<Provenance> prov;
  c.execution_prompt().copy_to(ids, &prov);
  // system(4) resume_prefix(1) summary(3) resume_suffix(1) step3(1+3+2) step4(1+3+2) header(1)
  const std::vector<TokenId> expected = {1,  1,  1,  1,  92, 7,  7,  7,  93, 90, 13,
                                         13, 13, 23, 23, 90, 14, 14, 14, 24, 24, 90};
  EXPECT_EQ(ids, expected);
  for (size_t i = 5; i < 8; ++i) EXPECT_EQ(prov[i], Provenance::kCopiedSummary);
  for (size_t i = 9; i < 21; ++i) EXPECT_EQ(prov[i], Provenance::kCopiedTail) << i;
  EXPECT_EQ(c.tokens(), static_cast<int64_t>(ids.size()));
  EXPECT_FALSE(c.needs_compaction()) << "a fresh window has no action yet";
}

TEST(Context, RebuildReducesKUntilItFitsBelowCMinusReserve) {
  // Steps of 1 + 10 + 10 = 21 tokens. Base after rebuild: 2 + 1 + 2 + 1 + header 1 = 7.
  for (auto [capacity, expected_k] : std::vector<std::pair<int, int>>{{80, 2}, {55, 1}, {30, 0}}) {
    Context c(budget(capacity, 10), test_template());
    ASSERT_TRUE(c.start(tokens(2, 1), {}));
    for (int s = 0; s < 3; ++s) {
      c.append_action(tokens(10, 3), Provenance::kSampled);
      c.append_observation(tokens(10, 4));
    }
    const RebuildResult r = c.rebuild(tokens(2, 7));
    ASSERT_EQ(r.status, RebuildStatus::kRebuilt) << capacity;
    EXPECT_EQ(r.kept_steps, expected_k) << "capacity " << capacity;
    EXPECT_LT(c.tokens(), capacity - 10);
  }
  Context c(budget(20, 10), test_template());
  ASSERT_TRUE(c.start(tokens(2, 1), {}));
  c.append_action(tokens(3, 3), Provenance::kSampled);
  EXPECT_EQ(c.rebuild(tokens(8, 7)).status, RebuildStatus::kDoesNotFit);  // 2+1+8+1+1 = 13 >= 10
}

TEST(Context, SummaryPromptTruncatesTheLargestObservationInATemporaryCopy) {
  Budget b = budget(100, 40);
  b.summary_cap = 40;  // the summary prompt must be <= 60 tokens
  Context c(b, test_template());
  ASSERT_TRUE(c.start(tokens(2, 1), tokens(2, 2)));
  c.append_action(tokens(2, 3), Provenance::kSampled);
  c.append_observation(tokens(48, 5));  // one large observation
  c.append_action(tokens(2, 3), Provenance::kSampled);
  c.append_observation(tokens(6, 6));
  const int64_t live = c.tokens();
  PromptView p;
  ASSERT_TRUE(c.summary_prompt(p));
  EXPECT_LE(p.size(), 60);
  EXPECT_EQ(c.tokens(), live) << "the live history is unchanged";
  std::vector<TokenId> ids = p.ids();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 94), 1) << "one marker for the one cut observation";
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 6), 6) << "the small observation is intact";
  EXPECT_EQ(ids.back(), 91);
  // Nothing left to shrink: fails cleanly.
  Budget tiny = budget(30, 20);
  tiny.summary_cap = 20;
  Context d(tiny, test_template());
  ASSERT_TRUE(d.start(tokens(9, 1), tokens(1, 2)));
  d.append_action(tokens(2, 3), Provenance::kSampled);
  PromptView q;
  EXPECT_FALSE(d.summary_prompt(q));
}

// An observation that opens the next turn itself (a template with no generation prompt after it, DeepSeek-V3
// after tool results): that turn has no header, in the count, the prompt and the step; the step's later
// observations are still the ones a summary prompt may cut; a rebuild that keeps the step keeps the turn
// opened, one that keeps no step writes the header after the resume turn, and a kept step whose turn a
// dropped step's observation had opened gets its header back.
TEST(Context, AnObservationThatOpensTheTurnLeavesOutItsHeader) {
  Budget b = budget(200, 20);
  b.summary_cap = 20;
  Context c(b, test_template());
  ASSERT_TRUE(c.start(tokens(2, 1), tokens(2, 2)));
  c.append_action(tokens(3, 3), Provenance::kSampled);
  c.append_observation(tokens(4, 4), true);
  EXPECT_EQ(c.tokens(), 2 + 2 + 1 + 3 + 4) << "no header after the observation that opened the turn";
  EXPECT_TRUE(c.next_turn_header().empty());
  std::vector<TokenId> ids = c.execution_prompt().ids();
  EXPECT_EQ(ids, (std::vector<TokenId>{1, 1, 2, 2, 90, 3, 3, 3, 4, 4, 4, 4}));
  c.append_action(tokens(2, 5), Provenance::kSampled);  // answers right after the observation
  EXPECT_EQ(c.next_turn_header().size(), 1u) << "the next turn has the template's header again";
  c.append_observation(tokens(170, 6));
  EXPECT_EQ(c.tokens(), 12 + 2 + 170 + 1);
  ids = c.execution_prompt().ids();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 90), 2) << "headers of the first and the next turn only";
  // The summary prompt cuts the large observation of the header-less step (not its action).
  PromptView summary;
  ASSERT_TRUE(c.summary_prompt(summary));
  ids = summary.ids();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 5), 2) << "the action is intact";
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 94), 1) << "the observation was cut";
  // The last observation opens the turn; a rebuild keeping it keeps the turn opened.
  c.append_action(tokens(1, 7), Provenance::kSampled);
  c.append_observation(tokens(3, 8), true);
  Context d(b, test_template());
  ASSERT_TRUE(d.start(tokens(2, 1), tokens(2, 2)));
  for (int s = 0; s < 3; ++s) {
    d.append_action(tokens(1, 10 + s), Provenance::kSampled);
    d.append_observation(tokens(2, 20 + s), s != 1);  // step 1's turn opened by step 0's observation
  }
  ASSERT_EQ(d.rebuild(tokens(1, 9)).kept_steps, 2);
  ids = d.execution_prompt().ids();
  EXPECT_EQ(ids, (std::vector<TokenId>{1, 1, 92, 9, 93, 90, 11, 21, 21, 90, 12, 22, 22}))
      << "the resume turn, then step 1 with the header back, step 2, and no header after its observation";
  EXPECT_EQ(d.tokens(), static_cast<int64_t>(ids.size()));
  // Keeping no step: the resume turn is followed by the header.
  Budget tight = budget(17, 10, 0);
  Context e(tight, test_template());
  ASSERT_TRUE(e.start(tokens(2, 1), {}));
  e.append_action(tokens(1, 10), Provenance::kSampled);
  e.append_observation(tokens(2, 20), true);
  ASSERT_EQ(e.rebuild(tokens(1, 9)).kept_steps, 0);
  ids = e.execution_prompt().ids();
  EXPECT_EQ(ids, (std::vector<TokenId>{1, 1, 92, 9, 93, 90}));
  EXPECT_EQ(e.tokens(), 6);
}

TEST(Context, CompactionBudgetIsCounted) {
  Budget b = budget(100, 20);
  b.max_compactions = 1;
  Context c(b, test_template());
  ASSERT_TRUE(c.start(tokens(2, 1), {}));
  c.append_action(tokens(1, 3), Provenance::kSampled);
  EXPECT_FALSE(c.compactions_exhausted());
  ASSERT_EQ(c.rebuild(tokens(1, 7)).status, RebuildStatus::kRebuilt);
  EXPECT_TRUE(c.compactions_exhausted());
}

}  // namespace
}  // namespace crl
