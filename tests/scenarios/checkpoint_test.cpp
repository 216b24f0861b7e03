// Checkpoint files (scenarios/checkpoint.h) and resuming a scenario run from them in process
// (scenarios/runner.h): truncated, corrupted, foreign and mismatched files are clear errors naming the file;
// a run resumed from any of its checkpoints writes the bytes of the uninterrupted run, for any thread count.
#include "scenarios/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "engine/error.h"
#include "engine/file_io.h"
#include "scenarios/report.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"
#include "tests/temp_dir.h"

namespace crl::scenarios {
namespace {

namespace fs = std::filesystem;

// A fresh folder of its own under the system's temporary folder (removed at the end).
// A unique folder from tests/temp_dir.h, with its path as a string.
struct TempDir {
  crl::test::TempDir folder;
  std::string path = folder.str();
};

// The toy with a few training episodes, two arms and two seeds: a run takes well under a second.
ScenarioSpec small_toy() {
  ScenarioSpec spec = load_scenario(std::string(CRL_SOURCE_DIR) + "/scenarios/toy.pbtxt");
  spec.seeds = {7, 17};
  for (ArmSpec& arm : spec.arms) {
    auto* t = arm.setup.mutable_training();
    t->set_episodes(96);
    t->set_eval_interval(48);
    t->set_curve_eval_episodes(40);
    t->set_eval_episodes(100);
    t->set_checkpoint_every(32);
  }
  return spec;
}

std::string outputs(const ScenarioSpec& spec, const ScenarioResult& result) {
  return format_summary_json(result) + format_curves_csv(result) + format_curves_svg(result) +
         format_report(spec, result, "crl run toy");
}

proto::checkpoint::Checkpoint sample_checkpoint() {
  proto::checkpoint::Checkpoint ck;
  ck.set_scenario("toy");
  ck.set_arm("joint");
  ck.set_seed(7);
  ck.mutable_policy()->set_type("tabular");
  for (int i = 0; i < 40; ++i) ck.mutable_policy()->mutable_tabular()->add_execute_logits(0.25 * i);
  ck.mutable_run()->set_episodes_done(64);
  return ck;
}

std::string error_of(const std::string& bytes) {
  try {
    decode_checkpoint(bytes, "dir/x.ckpt");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointFile, RoundTripsAndIsDeterministic) {
  const auto ck = sample_checkpoint();
  const std::string bytes = encode_checkpoint(ck);
  EXPECT_EQ(bytes, encode_checkpoint(ck));
  const auto back = decode_checkpoint(bytes, "x.ckpt");
  EXPECT_EQ(back.SerializeAsString(), ck.SerializeAsString());
}

TEST(CheckpointFile, TruncatedFilesAreErrorsNamingTheFile) {
  const std::string bytes = encode_checkpoint(sample_checkpoint());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string message = error_of(bytes.substr(0, n));
    ASSERT_FALSE(message.empty()) << "a file cut to " << n << " of " << bytes.size() << " bytes was accepted";
    EXPECT_NE(message.find("dir/x.ckpt"), std::string::npos) << message;
  }
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
  EXPECT_NE(error_of(bytes.substr(0, bytes.size() / 2)).find("truncated"), std::string::npos);
}

TEST(CheckpointFile, CorruptedBytesAreErrors) {
  const std::string bytes = encode_checkpoint(sample_checkpoint());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    const std::string message = error_of(bad);
    ASSERT_FALSE(message.empty()) << "a flipped bit at byte " << i << " was accepted";
    EXPECT_NE(message.find("dir/x.ckpt"), std::string::npos) << message;
  }
  // A flip inside the payload is named as corruption, with both hashes.
  std::string bad = bytes;
  bad[bytes.size() - 5] ^= 0x01;
  EXPECT_NE(error_of(bad).find("corrupted: the payload's SHA-256 is"), std::string::npos) << error_of(bad);
}

TEST(CheckpointFile, OtherVersionsAndFormatsAreRefused) {
  proto::checkpoint::CheckpointFile file;
  file.ParseFromString(encode_checkpoint(sample_checkpoint()));
  file.set_version(2);
  EXPECT_NE(error_of(file.SerializeAsString()).find("version 2, this build reads version 1"),
            std::string::npos);
  file.set_version(1);
  file.set_format("something.else");
  EXPECT_NE(error_of(file.SerializeAsString()).find("\"something.else\", expected \"crl.checkpoint\""),
            std::string::npos);
  EXPECT_NE(error_of("name: \"toy\"\n").find("not a checkpoint"), std::string::npos);
  // A missing file names the path.
  try {
    read_checkpoint("/nonexistent/dir/a.ckpt");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/a.ckpt"), std::string::npos);
  }
}

TEST(CheckpointFile, LayoutAndListing) {
  TempDir dir;
  EXPECT_EQ(checkpoint_path("out", "joint", 7, 64), "out/checkpoints/joint/seed-7/episode-0000000064.ckpt");
  EXPECT_EQ(checkpoint_folder("out", "a/b c", 7), "out/checkpoints/a%2Fb%20c/seed-7");
  EXPECT_EQ(checkpoint_folder("out", "..", 7), "out/checkpoints/%2E%2E/seed-7");
  for (int64_t e : {32, 96, 64})
    write_checkpoint(checkpoint_path(dir.path, "joint", 7, e), sample_checkpoint());
  write_file_atomic(checkpoint_folder(dir.path, "joint", 7) + "/episode-0000000128.ckpt.tmp.1", "partial");
  const auto files = list_checkpoints(checkpoint_folder(dir.path, "joint", 7));
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], checkpoint_path(dir.path, "joint", 7, 96));
  EXPECT_EQ(files[2], checkpoint_path(dir.path, "joint", 7, 32));
}

TEST(CheckpointResume, FromEveryCheckpointGivesTheUninterruptedBytes) {
  const ScenarioSpec spec = small_toy();
  TempDir full;
  RunOptions options;
  options.checkpoint_dir = full.path;
  const std::string reference = outputs(spec, run_scenario(spec, options));
  // Checkpoints without checkpoints: the same results (writing them changes nothing).
  EXPECT_EQ(outputs(spec, run_scenario(spec, RunOptions{})), reference);
  const std::string folder = checkpoint_folder(full.path, "joint", 17);
  const std::vector<std::string> all = list_checkpoints(folder);
  ASSERT_EQ(all.size(), 3u);  // after 32 and 64 episodes, and the final one after 96

  for (size_t keep = 0; keep <= all.size(); ++keep) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE("checkpoints kept " + std::to_string(keep) + ", threads " + std::to_string(threads));
      TempDir dir;
      fs::copy(fs::path(full.path) / "checkpoints", fs::path(dir.path) / "checkpoints",
               fs::copy_options::recursive);
      // Keep the oldest `keep` checkpoints of (joint, 17); the other runs resume from their final ones.
      for (size_t i = 0; i + keep < all.size(); ++i) {
        fs::remove(checkpoint_folder(dir.path, "joint", 17) + "/" + fs::path(all[i]).filename().string());
      }
      RunOptions resume;
      resume.threads = threads;
      resume.checkpoint_dir = dir.path;
      resume.resume = true;
      EXPECT_EQ(outputs(spec, run_scenario(spec, resume)), reference);
    }
  }
}

TEST(CheckpointResume, ChangedScenarioIsRefusedButCheckpointEveryMayChange) {
  ScenarioSpec spec = small_toy();
  spec.arms.resize(1);
  spec.seeds = {7};
  TempDir dir;
  RunOptions options;
  options.checkpoint_dir = dir.path;
  const std::string reference = outputs(spec, run_scenario(spec, options));
  options.resume = true;
  spec.arms[0].setup.mutable_training()->set_checkpoint_every(50);
  EXPECT_EQ(outputs(spec, run_scenario(spec, options)), reference);

  spec.arms[0].setup.mutable_learner()->set_actor_lr(0.25);
  try {
    run_scenario(spec, options);
    ADD_FAILURE() << "a checkpoint of another setup was resumed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("episode-0000000096.ckpt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("another setup of arm \"joint\""), std::string::npos) << e.what();
  }
  // A corrupted newest checkpoint is an error naming it, not a silent restart.
  spec = small_toy();
  spec.arms.resize(1);
  spec.seeds = {7};
  const std::string newest = checkpoint_path(dir.path, "joint", 7, 96);
  std::string bytes = read_file(newest);
  bytes.resize(bytes.size() / 2);
  write_file_atomic(newest, bytes);
  try {
    run_scenario(spec, options);
    ADD_FAILURE() << "a truncated checkpoint was resumed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(newest), std::string::npos) << e.what();
  }
  // Without --resume the run starts over and replaces the checkpoints.
  options.resume = false;
  EXPECT_EQ(outputs(spec, run_scenario(spec, options)), reference);
  EXPECT_NO_THROW(read_checkpoint(newest));
}

TEST(CheckpointResume, HandMadeRunStatesAreRefused) {
  ScenarioSpec spec = small_toy();
  spec.arms.resize(1);
  spec.seeds = {7};
  TempDir dir;
  RunOptions options;
  options.checkpoint_dir = dir.path;
  run_scenario(spec, options);
  const std::string newest = checkpoint_path(dir.path, "joint", 7, 96);
  std::filesystem::remove(newest);
  const std::string path = checkpoint_path(dir.path, "joint", 7, 64);
  auto ck = read_checkpoint(path);
  ck.mutable_run()->set_next_point(64);  // a valid hash over a state the loop cannot continue from
  write_checkpoint(path, ck);
  options.resume = true;
  try {
    run_scenario(spec, options);
    ADD_FAILURE() << "an inconsistent run state was resumed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inconsistent run state"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace crl::scenarios
