// The hard namespace of the synthetic suite (envs/synthetic/hard_task.h): its splits are balanced, pinned by
// the committed manifest and reproducible; the other namespaces are byte-identical to what they were before
// it existed (pinned hashes); under the namespace's default budget every episode compacts at least 6 times;
// bad hard files are rejected with typed errors.
#include <filesystem>
#include <iostream>
#include <set>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/sha256.h"
#include "envs/codec.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "envs/synthetic/oracle.h"
#include "envs/synthetic/splits.h"
#include "envs/synthetic/synthetic_env.h"
#include "gtest/gtest.h"
#include "synthetic_test_util.h"

namespace crl::envs::synthetic {
namespace {

using testing::TempDir;

std::string hard_dir() {
  return std::string(CRL_SOURCE_DIR) + "/data/synthetic_hard";
}

// The manifests of the 16-record namespaces as they were before the hard namespace was added (data/synthetic
// is committed; phase3 is regenerated, so its hashes are pinned here).
const std::map<std::string, std::map<std::string, std::string>> kPinned = {
    {"default",
     {{"train.jsonl", "1e5e1df11fa9165b5494e04b32e8f9e735db48ada7b2732d00156dd2172ee20f"},
      {"dev.jsonl", "bde5ae5bc01b54959faa64f053d971db935e23429f66cd4e682ad93491e95049"},
      {"test.jsonl", "3c07e22349fb3e12a5fd94ba3523a9eeb4b4d0a10ef66a4aa0daee28d5a099e4"}}},
    {"phase3",
     {{"train.jsonl", "5aab3feb41263c5eb93d646ecbd8300e62d7f27f75be9e4b4245ba5de2dcbcdb"},
      {"dev.jsonl", "f30b6bc051cf075a2a4f6c128d96d189bef8e7b2b462e421612481247055e4c1"},
      {"test.jsonl", "0ccb243c11d3667b94a7c943c92e020da3428a9925998d1b3f59ee4145f21df6"}}},
};

TEST(synthetic_hard, OldNamespacesAreByteIdentical) {
  for (const auto& [name_space, hashes] : kPinned) {
    int checked = 0;
    for (const auto& [name, content] : generate_split_files(name_space)) {
      if (name == kManifestName) continue;
      EXPECT_EQ(sha256_hex(content), hashes.at(name)) << name_space << "/" << name;
      ++checked;
    }
    EXPECT_EQ(checked, 3);
  }
}

TEST(synthetic_hard, SplitsAreBalancedPinnedAndReproducible) {
  EXPECT_TRUE(check_split_dir(hard_dir()).empty()) << "data/synthetic_hard differs from its manifest";
  for (const auto& [name, content] : generate_split_files("hard")) {
    EXPECT_TRUE(content == read_file(hard_dir() + "/" + name))
        << name << " differs from data/synthetic_hard/" << name
        << ": regenerate with `crl splits --namespace hard`";
  }
  const std::map<std::string, int> per_type = {{"train", 80}, {"dev", 20}, {"test", 20}};
  std::set<std::string> ids;
  for (const auto& [split, n] : per_type) {
    const std::vector<SyntheticTask> tasks = load_split(hard_dir(), split);
    ASSERT_EQ(tasks.size(), static_cast<size_t>(3 * n));
    std::map<TaskType, int> count;
    for (size_t i = 0; i < tasks.size(); ++i) {
      const SyntheticTask& t = tasks[i];
      EXPECT_EQ(t.type, kTaskTypes[i % 3]) << "types interleave";
      ++count[t.type];
      EXPECT_TRUE(ids.insert(t.task_id).second) << t.task_id;
      ASSERT_EQ(t.records.size(), static_cast<size_t>(kHardRecordsPerTask));
      // Shortcut-free by construction: the answer's own kind and key occur in distractors too.
      int same_key = 0, same_kind = 0;
      for (int r = 0; r < kHardRecordsPerTask; ++r) {
        if (std::find(t.milestones.begin(), t.milestones.end(), r) != t.milestones.end()) continue;
        same_key += t.records[r].key == t.records[t.milestones[0]].key;
        same_kind += t.records[r].kind == t.records[t.milestones[0]].kind;
      }
      // early_fact: other FACTs and NOTEs of the label; latest_update: other UPDATEs; ordered_plan: DRAFT
      // and REJECTED steps of the same key (MILESTONE is the answer's kind, as the question says).
      if (t.type != TaskType::kLatestUpdate) {
        EXPECT_GE(same_key, t.type == TaskType::kOrderedPlan ? 9 : 2);
      }
      if (t.type != TaskType::kOrderedPlan) {
        EXPECT_GE(same_kind, 3) << t.task_id;
      }
      if (t.type == TaskType::kEarlyFact) {
        EXPECT_LT(t.milestones[0], 12);
        int later_notes = 0;
        for (int r = t.milestones[0] + 1; r < kHardRecordsPerTask; ++r)
          later_notes += t.records[r].kind == "NOTE" && t.records[r].key == t.target;
        EXPECT_GE(later_notes, 2) << t.task_id << ": the newest record of the key is not the answer";
      }
      if (t.type == TaskType::kLatestUpdate) {
        EXPECT_LT(t.milestones.back(), 40) << "never in the last 8";
      }
    }
    for (TaskType type : kTaskTypes) EXPECT_EQ(count[type], n);
  }
  EXPECT_EQ(task_to_json(generate_task("hard", TaskType::kLatestUpdate, 3, "train")),
            task_to_json(generate_task("hard", TaskType::kLatestUpdate, 3, "train")));
}

TEST(synthetic_hard, SpecDeclaresTheLongVocabularyAndItsOwnBudget) {
  const auto hard = crl::make_env("synthetic", {{"namespace", "hard"}, {"view", "symbolic"}});
  const auto plain = crl::make_env("synthetic", {{"view", "symbolic"}});
  const Vocabulary& v = Vocabulary::get();
  EXPECT_EQ(plain->spec().symbols.size(), 205u) << "the 16-record namespaces keep their vocabulary";
  EXPECT_EQ(hard->spec().symbols.size(), 205u + 2 * 32);
  EXPECT_TRUE(
      std::equal(plain->spec().symbols.begin(), plain->spec().symbols.end(), hard->spec().symbols.begin()))
      << "appended, never reordered";
  EXPECT_EQ(v.name(v.keep(47)), "keep:48");
  EXPECT_EQ(v.keep_index(v.keep(47)), 47);
  EXPECT_EQ(v.rec_index(v.rec(16)), 16);
  EXPECT_EQ(v.keep_index(v.rec(20)), -1);
  EXPECT_EQ(hard->spec().symbolic_budget.summary_cap, kHardSummaryCap);
  EXPECT_NO_THROW(hard->spec().symbolic_budget.validate("hard"));
  EXPECT_NO_THROW(hard->spec().text_budget.validate("hard"));
}

struct Played {
  double reward = 0;
  int compactions = 0;
  std::string reason;
};

Played play_oracle(const std::string& view, int task_index) {
  std::unique_ptr<Env> env = crl::make_env("synthetic", {{"namespace", "hard"}, {"view", view}});
  const auto& synthetic = dynamic_cast<const SyntheticEnv&>(*env);
  const SyntheticTask& task = synthetic.tasks().tasks[task_index];
  const Budget budget = env->spec().default_budget(view);
  const auto codec = make_codec(view, env->spec());
  Episode episode(std::move(env), codec, EpisodeConfig{budget, 7, 0, 0, ""});
  episode.start(Task{task.task_id, 0, "dev"});
  const bool symbolic = view == "symbolic";
  Oracle oracle(task, symbolic);
  while (!episode.done()) {
    Decision decision;
    const int seen = synthetic.records_seen();
    if (episode.request().role == Role::kSummarize) {
      decision.tokens =
          symbolic ? oracle.summary_symbols(seen) : codec->encode_action(oracle.summary_text(seen));
      // The oracle names every observed milestone; a summary holds at most summary_cap tokens.
      const auto cap = static_cast<size_t>(episode.request().max_new_tokens);
      if (decision.tokens.size() > cap) decision.tokens.resize(cap);
    } else {
      const Action action = oracle.act();
      decision.tokens = symbolic ? action.symbols : codec->encode_action(action.text);
    }
    episode.submit(decision);
  }
  return Played{episode.reward(), episode.context().compactions(), episode.reason()};
}

TEST(synthetic_hard, EveryEpisodeCompactsAtLeastSixTimesUnderTheDefaultBudget) {
  for (const std::string view : {"symbolic", "text"}) {
    int lo = 1 << 30, hi = 0;
    for (int i = 0; i < 60; ++i) {
      const Played p = play_oracle(view, i);
      SCOPED_TRACE(view + " task " + std::to_string(i) + ": " + p.reason);
      ASSERT_EQ(p.reward, 1.0) << "the oracle reads all 48 records and answers";
      EXPECT_GE(p.compactions, 6);
      lo = std::min(lo, p.compactions);
      hi = std::max(hi, p.compactions);
    }
    std::cout << view << ": compactions per dev episode min " << lo << " max " << hi << "\n";
  }
}

TEST(synthetic_hard, BadHardFilesGetTypedErrors) {
  TempDir dir;
  // A 16-record task under a hard id: the record count of the namespace is checked.
  SyntheticTask t = generate_task("default", TaskType::kOrderedPlan, 0, "dev");
  std::string line = task_to_json(t);
  const std::string id = t.task_id;
  t.task_id = make_task_id("hard", TaskType::kOrderedPlan, 0);
  t.seed = task_seed(t.task_id);
  write_file_atomic(dir.file("dev.jsonl"), task_to_json(t) + "\n");
  try {
    load_split(dir.str(), "dev");
    FAIL() << "a 16-record hard task loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "records");
    EXPECT_NE(std::string(e.what()).find("expected 48"), std::string::npos) << e.what();
  }
  // A hard early_fact with a second FACT of the target label: the answer is ambiguous.
  SyntheticTask h = generate_task("hard", TaskType::kEarlyFact, 80, "dev");
  for (Record& r : h.records) {
    if (r.kind == "NOTE" && r.key == h.target) {
      r.kind = "FACT";
      break;
    }
  }
  write_file_atomic(dir.file("dev.jsonl"), task_to_json(h) + "\n");
  try {
    load_split(dir.str(), "dev");
    FAIL() << "an ambiguous hard early_fact loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "records");
    EXPECT_NE(std::string(e.what()).find("exactly one"), std::string::npos) << e.what();
  }
  EXPECT_THROW(crl::make_env("synthetic", {{"namespace", "Hard"}}), Error);
}

}  // namespace
}  // namespace crl::envs::synthetic
