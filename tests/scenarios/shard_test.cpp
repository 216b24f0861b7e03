// Sharded sweeps (issue 19 item 3, scenarios/shard.h): `crl run S --shard I/N` for every I, then `crl merge`,
// writes summary.json, curves.csv, curves.svg and report.md byte-identical to a single-process `crl run S`,
// for N = 1, 2, 3 and 7 (more shards than the 6 jobs); the merge refuses missing, duplicate, foreign and
// interrupted shards with an error naming the folder.
#include "scenarios/shard.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/file_io.h"
#include "engine/proto_bytes.h"
#include "proto/shard.pb.h"
#include "scenarios/output_set.h"
#include "tests/crl_cli.h"
#include "tests/temp_dir.h"

namespace crl::scenarios {
namespace {

namespace fs = std::filesystem;

const char* const kFiles[] = {"summary.json", "curves.csv", "curves.svg", "report.md"};

// The toy scenario (2 arms x 3 seeds = 6 jobs) cut to a few seconds in all.
std::string toy(int64_t eval_episodes = 200) {
  std::string text = read_file(std::string(CRL_SOURCE_DIR) + "/scenarios/toy.pbtxt");
  const std::string from =
      "training { episodes: 1000 batch_size: 16 eval_episodes: 2000 eval_interval: 100 curve_eval_episodes: "
      "500 }";
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos);
  text.replace(at, from.size(),
               "training { episodes: 64 batch_size: 16 eval_episodes: " + std::to_string(eval_episodes) +
                   " eval_interval: 32 curve_eval_episodes: 50 }");
  return text;
}

std::map<std::string, std::string> result_files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const char* name : kFiles) out[name] = read_file((dir / name).string());
  return out;
}

std::string shard_dir(const fs::path& out, int i) {
  return (out / ("shard-" + std::to_string(i))).string();
}

void run_shards(const std::string& scenario, const fs::path& out, int n,
                const std::vector<std::string>& extra = {}) {
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> args = {
        "run", scenario, "--shard", std::to_string(i) + "/" + std::to_string(n), "--out", shard_dir(out, i)};
    args.insert(args.end(), extra.begin(), extra.end());
    const test::CliResult r = test::crl(args);
    ASSERT_EQ(r.code, 0) << r.err;
  }
}

test::CliResult merge(const std::vector<std::string>& shards, const fs::path& out) {
  std::vector<std::string> args = {"merge"};
  args.insert(args.end(), shards.begin(), shards.end());
  args.push_back("--out");
  args.push_back(out.string());
  return test::crl(args);
}

TEST(Shard, ParseAndAssignment) {
  EXPECT_EQ(parse_shard("2/7").index, 2u);
  EXPECT_EQ(parse_shard("2/7").count, 7u);
  for (const char* bad : {"7/7", "1/0", "-1/3", "1", "a/3", "1/3x", "/3", "1/"}) {
    EXPECT_THROW(parse_shard(bad), Error) << bad;
  }
  EXPECT_EQ(shard_jobs({1, 3}, 6), (std::vector<uint32_t>{1, 4}));
  EXPECT_TRUE(shard_jobs({6, 7}, 6).empty());
}

TEST(Shard, MergeIsByteIdenticalToOneProcess) {
  const test::TempDir tmp;
  const std::string scenario = (tmp.path() / "toy.pbtxt").string();
  write_file_atomic(scenario, toy());
  const fs::path out = tmp.path() / "results";
  // The reference: one process (the report names its command line, so the shards use the same --out).
  ASSERT_EQ(test::crl({"run", scenario, "--out", out.string(), "--threads", "2"}).code, 0);
  const auto reference = result_files(out);
  ASSERT_NE(reference.at("report.md").find("crl run " + scenario + " --out " + out.string()),
            std::string::npos);
  for (const int n : {1, 2, 3, 7}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    fs::remove_all(out);
    run_shards(scenario, out, n);
    std::vector<std::string> shards;
    for (int i = n - 1; i >= 0; --i) shards.push_back(shard_dir(out, i));  // any order
    const test::CliResult r = merge(shards, out);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto merged = result_files(out);
    for (const char* name : kFiles) EXPECT_EQ(merged.at(name), reference.at(name)) << name;
  }
}

// A shard's job records are the same bytes on every run: protobuf writes map entries (the example
// trajectory's metadata) in a per-instance hash order unless serialization is deterministic, so each file
// must equal its own message re-serialized with sorted maps, and two runs must agree byte for byte.
TEST(Shard, JobRecordsAreTheSameBytesOnEveryRun) {
  const test::TempDir tmp;
  const std::string scenario = (tmp.path() / "toy.pbtxt").string();
  write_file_atomic(scenario, toy(50));
  run_shards(scenario, tmp.path() / "a", 1);
  run_shards(scenario, tmp.path() / "b", 1, {"--threads", "2"});
  int records = 0;
  for (const auto& entry : fs::directory_iterator(shard_dir(tmp.path() / "a", 0))) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("job-", 0) != 0) continue;
    ++records;
    const std::string bytes = read_file(entry.path().string());
    proto::shard::JobRecord record;
    ASSERT_TRUE(record.ParseFromString(bytes)) << name;
    EXPECT_EQ(bytes, deterministic_bytes(record)) << name << ": map entries not in key order";
    EXPECT_EQ(bytes, read_file((fs::path(shard_dir(tmp.path() / "b", 0)) / name).string())) << name;
  }
  EXPECT_EQ(records, 6);
}

// Other seeds, the --opt=value forms and --threads: the merged report still names the single-process command.
TEST(Shard, MergeKeepsSeedsAndTheCommandLine) {
  const test::TempDir tmp;
  const std::string scenario = (tmp.path() / "toy.pbtxt").string();
  write_file_atomic(scenario, toy());
  const fs::path out = tmp.path() / "results";
  ASSERT_EQ(test::crl({"run", scenario, "--out=" + out.string(), "--seeds", "29,7"}).code, 0);
  const auto reference = result_files(out);
  fs::remove_all(out);
  for (int i = 0; i < 2; ++i) {
    const test::CliResult r = test::crl({"run", scenario, "--shard=" + std::to_string(i) + "/2", "--threads",
                                         "2", "--out=" + shard_dir(out, i), "--seeds", "29,7"});
    ASSERT_EQ(r.code, 0) << r.err;
  }
  ASSERT_EQ(merge({shard_dir(out, 0), shard_dir(out, 1)}, out).code, 0);
  const auto merged = result_files(out);
  for (const char* name : kFiles) EXPECT_EQ(merged.at(name), reference.at(name)) << name;
  EXPECT_NE(merged.at("report.md").find("--out=" + out.string() + " --seeds 29,7"), std::string::npos);
}

// `crl run --arms`: an arm run alone gives the results it has in the whole file's run (they depend on its
// setup and the seed only), its shards merge into the single-process bytes, and shards of other arms do not
// merge with them.
TEST(Shard, ASubsetOfArmsRunsAndMergesLikeTheWholeFile) {
  const test::TempDir tmp;
  const std::string scenario = (tmp.path() / "toy.pbtxt").string();
  write_file_atomic(scenario, toy(100));
  const fs::path all = tmp.path() / "all", one = tmp.path() / "one", merged = tmp.path() / "merged";
  ASSERT_EQ(test::crl({"run", scenario, "--out", all.string()}).code, 0);
  const test::CliResult r = test::crl({"run", scenario, "--arms", "frozen", "--out", one.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto whole = nlohmann::json::parse(read_file((all / "summary.json").string()));
  const auto alone = nlohmann::json::parse(read_file((one / "summary.json").string()));
  ASSERT_EQ(whole.at("arms").size(), 2u);
  ASSERT_EQ(alone.at("arms").size(), 1u);
  EXPECT_EQ(whole.at("arms")[1].at("name"), "frozen");
  EXPECT_EQ(alone.at("arms")[0], whole.at("arms")[1]);
  EXPECT_NE(read_file((one / "report.md").string()).find("--arms frozen"), std::string::npos);

  // Sharded: the same bytes as the single-process subset (its report names that command).
  const fs::path shards = tmp.path() / "shards";
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(test::crl({"run", scenario, "--shard", std::to_string(i) + "/2", "--out", shard_dir(shards, i),
                         "--arms", "frozen"})
                  .code,
              0);
  }
  ASSERT_EQ(merge({shard_dir(shards, 0), shard_dir(shards, 1)}, merged).code, 0);
  const std::string expected = read_file((one / "summary.json").string());
  EXPECT_EQ(read_file((merged / "summary.json").string()), expected);
  EXPECT_EQ(read_file((merged / "curves.csv").string()), read_file((one / "curves.csv").string()));

  // A shard of another arm selection refuses to merge with them.
  const fs::path other = tmp.path() / "other";
  run_shards(scenario, other, 2, {"--arms", "joint"});
  const test::CliResult mixed = merge({shard_dir(shards, 0), shard_dir(other, 1)}, tmp.path() / "mixed");
  EXPECT_EQ(mixed.code, 1);
  EXPECT_NE(mixed.err.find("ran arms joint, " + shard_dir(shards, 0) + " ran arms frozen"), std::string::npos)
      << mixed.err;

  // Unknown or repeated arms, and --arms without a scenario, are errors that name the option.
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"run", scenario, "--arms", "nope", "--out", (tmp.path() / "x").string()},
        std::vector<std::string>{"run", scenario, "--arms", "joint,joint", "--out",
                                 (tmp.path() / "x").string()},
        std::vector<std::string>{"run", "--arms", "joint"}}) {
    const test::CliResult e = test::crl(bad);
    EXPECT_EQ(e.code, 1);
    EXPECT_NE(e.err.find("option --arms"), std::string::npos) << e.err;
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "x" / "summary.json"));
}

TEST(Shard, MergeRefusesBadShardSets) {
  const test::TempDir tmp;
  const std::string scenario = (tmp.path() / "toy.pbtxt").string(),
                    other = (tmp.path() / "other.pbtxt").string();
  write_file_atomic(scenario, toy());
  write_file_atomic(other, toy(100));  // other bytes: another evaluation size
  const fs::path a = tmp.path() / "a", b = tmp.path() / "b", out = tmp.path() / "merged";
  run_shards(scenario, a, 3);
  run_shards(other, b, 3);
  const auto refused = [&](const std::vector<std::string>& shards, const std::string& says) {
    const test::CliResult r = merge(shards, out);
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out / "report.md"));  // nothing written
  };
  // Missing: shard 1/3 holds jobs 1 and 4 (arm joint seed 17, arm frozen seed 17).
  refused({shard_dir(a, 0), shard_dir(a, 2)}, "shard 1/3 is missing");
  refused({shard_dir(a, 0), shard_dir(a, 2)}, "job 4 (arm \"frozen\", seed 17)");
  // Duplicate: the same shard twice, or a copy of it under another name.
  refused({shard_dir(a, 0), shard_dir(a, 1), shard_dir(a, 2), shard_dir(a, 1)}, "duplicate shard");
  fs::copy(shard_dir(a, 2), tmp.path() / "copy", fs::copy_options::recursive);
  refused({shard_dir(a, 0), shard_dir(a, 1), shard_dir(a, 2), (tmp.path() / "copy").string()},
          (tmp.path() / "copy").string() + ": is shard 2/3 again");
  // Another scenario's shard.
  refused({shard_dir(a, 0), shard_dir(b, 1), shard_dir(a, 2)}, shard_dir(b, 1) + ": comes from scenario");
  // Another N.
  run_shards(scenario, tmp.path() / "n2", 2);
  refused({shard_dir(a, 0), shard_dir(tmp.path() / "n2", 1), shard_dir(a, 2)}, "another split");
  // An interrupted shard (its set was being published when it died).
  write_file_atomic((fs::path(shard_dir(a, 1)) / kIncompleteMarker).string(), "");
  refused({shard_dir(a, 0), shard_dir(a, 1), shard_dir(a, 2)},
          shard_dir(a, 1) + ": shard folder holds the INCOMPLETE");
  fs::remove(fs::path(shard_dir(a, 1)) / kIncompleteMarker);
  // A lost job record; a folder that is no shard.
  fs::remove(fs::path(shard_dir(a, 1)) / "job-000004.pb");
  refused({shard_dir(a, 0), shard_dir(a, 1), shard_dir(a, 2)}, "lacks the record of job 4");
  refused({shard_dir(a, 0), tmp.path().string()}, "holds no shard.manifest");
  // A shard needs --out; a compaction-cost file cannot be sharded.
  EXPECT_EQ(test::crl({"run", scenario, "--shard", "0/2"}).code, 1);
  EXPECT_EQ(test::crl({"run", scenario, "--shard", "2/2", "--out", (tmp.path() / "x").string()}).code, 1);
}

}  // namespace
}  // namespace crl::scenarios
