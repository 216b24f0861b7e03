// The synthetic splits: byte-for-byte regeneration of the committed files, balance, ids unique across
// splits, and rejection of corrupt or truncated split files naming the file and line.
#include <filesystem>
#include <set>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/sha256.h"
#include "envs/synthetic/splits.h"
#include "gtest/gtest.h"
#include "synthetic_test_util.h"

namespace crl::envs::synthetic {
namespace {

using testing::committed_dir;
using testing::TempDir;

// Loads a copy of the committed dev split after `edit` has changed its content; returns the error text.
std::string load_error_after(const std::function<void(std::string&)>& edit, bool keep_manifest) {
  TempDir dir;
  std::string content = read_file(committed_dir() + "/dev.jsonl");
  edit(content);
  write_file_atomic(dir.file("dev.jsonl"), content);
  if (keep_manifest)
    write_file_atomic(dir.file("MANIFEST.sha256"), read_file(committed_dir() + "/MANIFEST.sha256"));
  try {
    load_split(dir.str(), "dev");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Offset of the start of line `line` (1-based) in `content`.
size_t line_start(const std::string& content, int line) {
  size_t pos = 0;
  for (int i = 1; i < line; ++i) pos = content.find('\n', pos) + 1;
  return pos;
}

TEST(synthetic_splits, RegenerationEqualsCommittedFilesByteForByte) {
  for (const auto& [name, content] : generate_split_files("default")) {
    SCOPED_TRACE(name);
    const std::string committed = read_file(committed_dir() + "/" + name);
    EXPECT_EQ(content.size(), committed.size());
    EXPECT_TRUE(content == committed)
        << name << " differs from data/synthetic/" << name
        << ": regenerate with `crl splits` only if the format change is intended";
  }
}

TEST(synthetic_splits, CommittedFolderMatchesItsManifest) {
  EXPECT_TRUE(check_split_dir(committed_dir()).empty());
}

TEST(synthetic_splits, GenerationIsDeterministic) {
  const SyntheticTask a = generate_task("default", TaskType::kOrderedPlan, 7, "train");
  const SyntheticTask b = generate_task("default", TaskType::kOrderedPlan, 7, "train");
  EXPECT_EQ(task_to_json(a), task_to_json(b));
  EXPECT_NE(task_to_json(a), task_to_json(generate_task("phase3", TaskType::kOrderedPlan, 7, "train")));
  EXPECT_EQ(a.task_id, "syn-default-ordered_plan-0007");
  EXPECT_EQ(a.seed, sha256_u64("syn|syn-default-ordered_plan-0007") & 0x7FFFFFFFFFFFFFFFull);
}

TEST(synthetic_splits, DefaultAndPhase3AreBalanced) {
  for (const auto& [name_space, per_type] : std::vector<std::pair<std::string, std::array<int, 3>>>{
           {"default", {80, 20, 20}}, {"phase3", {480, 60, 60}}}) {
    for (int s = 0; s < 3; ++s) {
      const std::vector<SyntheticTask> tasks = generate_split(name_space, kSplitNames[s]);
      ASSERT_EQ(tasks.size(), static_cast<size_t>(3 * per_type[s]));
      int count[3] = {0, 0, 0};
      for (size_t i = 0; i < tasks.size(); ++i) {
        const SyntheticTask& t = tasks[i];
        ++count[static_cast<int>(t.type)];
        EXPECT_EQ(t.type, kTaskTypes[i % 3]) << "types interleave in a fixed order";
        EXPECT_EQ(t.split, kSplitNames[s]);
        ASSERT_EQ(t.records.size(), 16u);
        for (const Record& r : t.records) {
          EXPECT_GE(approx_tokens(r.text), 30) << r.text;
          EXPECT_LE(approx_tokens(r.text), 50) << r.text;
        }
        int distractors = 0;
        for (int r = 0; r < kRecordsPerTask; ++r) {
          const bool milestone = std::find(t.milestones.begin(), t.milestones.end(), r) != t.milestones.end();
          if (!milestone && value_domain(t.records[r].value) == answer_domain(t.type)) ++distractors;
        }
        switch (t.type) {
          case TaskType::kEarlyFact:
            EXPECT_EQ(t.milestones, std::vector<int>{0});
            EXPECT_GE(distractors, 6);
            EXPECT_LE(distractors, 10);
            break;
          case TaskType::kLatestUpdate:
            EXPECT_GE(t.milestones.size(), 3u);
            EXPECT_LE(t.milestones.size(), 5u);
            EXPECT_GE(distractors, 4);
            EXPECT_LE(distractors, 8);
            break;
          case TaskType::kOrderedPlan:
            EXPECT_EQ(t.milestones.size(), 3u);
            EXPECT_GE(distractors, 3);
            EXPECT_LE(distractors, 6);
            EXPECT_LT(t.milestones[0], 5);
            EXPECT_GE(t.milestones[2], 11);
            break;
        }
      }
      for (int c : count) EXPECT_EQ(c, per_type[s]);
    }
  }
}

TEST(synthetic_splits, TaskIdsNeverRepeatAcrossSplits) {
  for (const std::string name_space : {"default", "phase3"}) {
    std::set<std::string> ids;
    size_t total = 0;
    for (std::string_view split : kSplitNames) {
      for (const SyntheticTask& t : generate_split(name_space, split)) {
        ids.insert(t.task_id);
        ++total;
      }
    }
    EXPECT_EQ(ids.size(), total) << name_space;
  }
}

TEST(synthetic_splits, BalanceReportNamesEveryType) {
  const std::string report = balance_report("dev", generate_split("default", "dev"));
  EXPECT_NE(report.find("split dev: 60 tasks (early_fact 20, latest_update 20, ordered_plan 20)"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("distractors"), std::string::npos);
  EXPECT_NE(report.find("answers"), std::string::npos);
}

TEST(synthetic_splits, JsonRoundTrips) {
  for (TaskType type : kTaskTypes) {
    const SyntheticTask t = generate_task("default", type, 3, "train");
    const SyntheticTask back = task_from_json(task_to_json(t), "test:1");
    EXPECT_EQ(task_to_json(back), task_to_json(t));
  }
}

TEST(synthetic_splits, LoadsTheCommittedDevSplit) {
  const std::vector<SyntheticTask> dev = load_split(committed_dir(), "dev");
  ASSERT_EQ(dev.size(), 60u);
  EXPECT_EQ(render_split(dev), read_file(committed_dir() + "/dev.jsonl"));
}

TEST(synthetic_splits, TruncatedFileIsRejectedNamingFileAndLine) {
  // Cut in the middle of the last line: no newline at the end.
  const std::string error = load_error_after([](std::string& c) { c.resize(c.size() - 100); }, false);
  EXPECT_NE(error.find("dev.jsonl:60"), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  // Cut in the middle of line 12, then a newline: the JSON itself is cut short.
  const std::string error12 =
      load_error_after([](std::string& c) { c = c.substr(0, line_start(c, 12) + 500) + "\n"; }, false);
  EXPECT_NE(error12.find("dev.jsonl:12"), std::string::npos) << error12;
  EXPECT_NE(error12.find("not valid JSON"), std::string::npos) << error12;
}

TEST(synthetic_splits, FileCutAtALineBoundaryIsCaughtByTheManifest) {
  const auto drop_last_line = [](std::string& c) { c.resize(line_start(c, 60)); };
  const std::string error = load_error_after(drop_last_line, true);
  EXPECT_NE(error.find("dev.jsonl"), std::string::npos) << error;
  EXPECT_NE(error.find("MANIFEST.sha256"), std::string::npos) << error;
  EXPECT_EQ(load_error_after(drop_last_line, false), "") << "without a manifest, 59 whole tasks are valid";
}

TEST(synthetic_splits, CorruptLinesAreRejectedNamingFileLineAndField) {
  struct Case {
    int line;
    std::string from, to, expect;
  };
  const std::vector<Case> cases = {
      {7, "{\"task_id\"", "{task_id", "not valid JSON"},
      {3, "\"answer\":\"", "\"answer\":\"x", "field 'answer'"},
      {5, "\"split\":\"dev\"", "\"split\":\"train\"", "field 'split'"},
      {9, "\"seed\":", "\"seed\":1", "field 'seed'"},
      {11, "\"kind\":\"LOG\"", "\"kind\":\"BLOG\"", "field 'records["},
      {2, "\"target\":", "\"extra\":1,\"target\":", "field 'extra'"},
      {4, "\"milestones\":[", "\"milestones\":[1,", "field 'milestones'"},
      {6, "\"type\":\"", "\"type\":\"x", "field 'type'"},
      // Issue 14 item 5: a repeated key is refused, not read as its last value.
      {8, "\"split\":\"dev\"", "\"split\":\"test\",\"split\":\"dev\"", "duplicate key \"split\""},
      // Issue 14 item 1: nesting past the shared reader's limit.
      {10, "\"milestones\":[", "\"milestones\":" + std::string(100000, '[') + "[", "nested deeper than 64"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expect);
    const std::string error = load_error_after(
        [&](std::string& content) {
          const size_t at = content.find(c.from, line_start(content, c.line));
          ASSERT_LT(at, line_start(content, c.line + 1)) << "the edit must land on line " << c.line;
          content.replace(at, c.from.size(), c.to);
        },
        false);
    EXPECT_NE(error.find("dev.jsonl:" + std::to_string(c.line) + ":"), std::string::npos) << error;
    EXPECT_NE(error.find(c.expect), std::string::npos) << error;
  }
}

TEST(synthetic_splits, RepeatedIdAndWrongSplitAreRejected) {
  const std::string repeated =
      load_error_after([](std::string& c) { c += c.substr(0, line_start(c, 2)); }, false);
  EXPECT_NE(repeated.find("dev.jsonl:61"), std::string::npos) << repeated;
  EXPECT_NE(repeated.find("repeats"), std::string::npos) << repeated;
  TempDir dir;
  write_file_atomic(dir.file("train.jsonl"), read_file(committed_dir() + "/dev.jsonl"));
  EXPECT_THROW(load_split(dir.str(), "train"), Error);
}

TEST(synthetic_splits, UnknownNamespaceNamesTheKnownOnes) {
  try {
    namespace_layout("phase9");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("default, phase3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace crl::envs::synthetic
