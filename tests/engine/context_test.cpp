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
