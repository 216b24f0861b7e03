#include "engine/trajectory.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/trace.h"
#include "engine/trajectory_io.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

// exec_0 (2 sampled), sum_0 (3 sampled), exec_1 (1 sampled), and a trailing exec with nothing sampled.
Trajectory sample_trajectory() {
  TokenArena arena;
  const Span prompt = arena.append(std::vector<TokenId>{1, 2, 3}, Provenance::kPrompt);
  const PromptView view(&arena, {prompt});
  Recorder r;
  r.begin_execution(view, 0);
  r.append(std::vector<TokenId>{10, 11}, Provenance::kSampled, std::vector<float>{-0.5f, -0.25f});
  r.append(std::vector<TokenId>{20, 21, 22}, Provenance::kEnvironment);
  r.add_summary(view, std::vector<TokenId>{30, 31, 32}, std::vector<float>{-1, -2, -3}, {}, "stop", 0,
                "keep 7");
  r.begin_execution(view, 1);
  r.append(std::vector<TokenId>{40}, Provenance::kSampled, {}, std::vector<float>{0.75f}, "length");
  r.add_summary(view, std::vector<TokenId>{50}, {}, {}, "stop", 1, "x");
  r.begin_execution(view, 2);
  r.append(std::vector<TokenId>{60}, Provenance::kForced);
  Trajectory header;
  header.rollout_id = "r1";
  header.env = "test";
  header.task_id = "t1";
  header.seed = 7;
  header.reward = 1.0;
  header.compactions = 2;
  header.metadata["view"] = "symbolic";
  return r.finish(header);
}

TEST(Recorder, BuildsSegmentsWithMasksNAfterAndDropsEmptyExecutions) {
  const Trajectory t = sample_trajectory();
  ASSERT_EQ(t.segments.size(), 4u);
  EXPECT_EQ(t.dropped_segments, 1);
  EXPECT_EQ(t.segments[0].actor_mask, (std::vector<uint8_t>{1, 1, 0, 0, 0}));
  EXPECT_EQ(t.segments[0].critic_mask, t.segments[0].actor_mask);
  EXPECT_EQ(t.segments[0].logprobs, (std::vector<float>{-0.5f, -0.25f, 0, 0, 0}));
  const std::vector<int64_t> n_sampled = {2, 3, 1, 1}, n_after = {5, 2, 1, 0};
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(t.segments[s].n_sampled, n_sampled[s]);
    EXPECT_EQ(t.segments[s].n_after, n_after[s]);
  }
  EXPECT_EQ(t.segments[2].values, (std::vector<float>{0.75f}));
  EXPECT_EQ(t.segments[2].finish_reason, "length");
  EXPECT_EQ(t.sampled_tokens(), 7);
}

// An open execution segment has room for a window of responses (no reallocation per turn); a finished
// trajectory holds only what its segments use.
TEST(Recorder, AFinishedSegmentGivesBackTheRoomItDidNotUse) {
  TokenArena arena;
  const PromptView view(&arena, {arena.append(std::vector<TokenId>{1, 2, 3}, Provenance::kPrompt)});
  Recorder r;
  r.begin_execution(view, 0);
  const size_t room = r.open_segment()->response_ids.capacity();
  EXPECT_GE(room, 1024u);
  for (int turn = 0; turn < 20; ++turn) {
    r.append(std::vector<TokenId>(14, 10), Provenance::kSampled, std::vector<float>(14, -0.5f));
    r.append(std::vector<TokenId>(30, 20), Provenance::kEnvironment);
  }
  EXPECT_EQ(r.open_segment()->response_ids.capacity(), room) << "880 tokens fit the room: no reallocation";
  r.add_summary(view, std::vector<TokenId>{5}, {}, {}, "stop", 0, "s");
  r.begin_execution(view, 1);  // a short window: 3 turns
  for (int turn = 0; turn < 3; ++turn) {
    r.append(std::vector<TokenId>(14, 10), Provenance::kSampled, std::vector<float>(14, -0.5f));
    r.append(std::vector<TokenId>(30, 20), Provenance::kEnvironment);
  }
  const Trajectory t = r.finish(Trajectory{});
  ASSERT_EQ(t.segments.size(), 3u);
  const Segment& s = t.segments[2];
  EXPECT_EQ(s.response_ids.size(), 132u);
  for (const size_t capacity :
       {s.response_ids.capacity(), s.response_provenance.capacity(), s.actor_mask.capacity(),
        s.critic_mask.capacity(), s.logprobs.capacity(), s.values.capacity()})
    EXPECT_LE(capacity, 132u + 256u);
}

TEST(Trajectory, ValidateNamesTheRolloutSegmentAndField) {
  Trajectory t = sample_trajectory();
  t.segments[1].n_sampled = 2;
  try {
    t.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "n_sampled");
    EXPECT_NE(std::string(e.what()).find("rollout \"r1\" segment 1"), std::string::npos) << e.what();
  }
  // Each failure's message says what was found (the messages are built only when a check fails).
  const auto message_of = [](const Trajectory& bad) -> std::string {
    try {
      bad.validate();
    } catch (const Error& e) {
      return e.field() + ": " + e.what();
    }
    return "(no error)";
  };
  t = sample_trajectory();
  t.segments[1].n_sampled = 2;
  EXPECT_NE(message_of(t).find("value 2 differs from the loss_mask sum 3"), std::string::npos)
      << message_of(t);
  t = sample_trajectory();
  t.segments[0].actor_mask[2] = 1;  // an observation marked trainable
  t.segments[0].n_sampled = 3;
  EXPECT_NE(message_of(t).find("token 2 is trainable but its provenance is environment"), std::string::npos)
      << message_of(t);
  t = sample_trajectory();
  t.segments[0].critic_mask[0] = 2;
  EXPECT_NE(message_of(t).find("mask entries are 0 or 1"), std::string::npos) << message_of(t);
  t = sample_trajectory();
  t.segments[0].critic_mask.pop_back();
  EXPECT_NE(message_of(t).find("critic_mask: "), std::string::npos) << message_of(t);
}

TEST(Trajectory, HashChangesWithAnyTrainingField) {
  const Trajectory t = sample_trajectory();
  EXPECT_EQ(t.hash(), sample_trajectory().hash());
  Trajectory u = t;
  u.segments[1].logprobs[0] = -1.5f;
  EXPECT_NE(u.hash(), t.hash());
  u = t;
  u.reward = 0.0;
  EXPECT_NE(u.hash(), t.hash());
}

TEST(TrajectoryIo, JsonlAndBinaryRoundTripExactly) {
  const test::TempDir temp;
  const std::filesystem::path dir = temp.path();
  const std::vector<Trajectory> in = {sample_trajectory(), sample_trajectory()};
  for (const std::string name : {"t.jsonl", "t.pb"}) {
    const std::string path = (dir / name).string();
    write_trajectories(path, in);
    const std::vector<Trajectory> out = read_trajectories(path);
    ASSERT_EQ(out.size(), 2u) << name;
    EXPECT_EQ(out[0].hash(), in[0].hash()) << name;
    EXPECT_EQ(out[1].metadata.at("view"), "symbolic");
  }
  // JSONL lines carry the export fields of PROTOCOL.md section 1 under their .proto names.
  const std::string jsonl = to_jsonl(in);
  for (const char* field :
       {"\"rollout_id\"", "\"segment_index\"", "\"num_segments\"", "\"kind\"", "\"prompt_ids\"",
        "\"response_ids\"", "\"loss_mask\"", "\"critic_mask\"", "\"rollout_log_probs\"", "\"reward\"",
        "\"status\"", "\"metadata\"", "\"n_after\""}) {
    EXPECT_NE(jsonl.find(field), std::string::npos) << field;
  }
  EXPECT_EQ(to_jsonl(in), jsonl) << "byte-stable export";
}

// Text decoded from sampled bytes (an untrained model's, a character cut by max_tokens) is not always valid
// UTF-8, which protobuf's string fields require: the export repairs it (one U+FFFD per ill-formed sequence),
// so a binary file is still read back. Before, libprotobuf logged an error and the .pb file could not be
// read.
TEST(TrajectoryIo, IllFormedUtf8IsRepairedSoBinaryFilesReadBack) {
  const test::TempDir temp;
  Trajectory t = sample_trajectory();
  t.segments[1].text = "keep \xE2\x82 7 \xFF";
  t.reason = "failed: \xC3";
  t.metadata["note"] = "x\xF0\x9F";
  for (const std::string name : {"t.pb", "t.jsonl"}) {
    const std::string path = (temp.path() / name).string();
    write_trajectories(path, {t});
    const std::vector<Trajectory> out = read_trajectories(path);
    ASSERT_EQ(out.size(), 1u) << name;
    EXPECT_EQ(out[0].segments[1].text, "keep \xEF\xBF\xBD 7 \xEF\xBF\xBD") << name;
    EXPECT_EQ(out[0].reason, "failed: \xEF\xBF\xBD") << name;
    EXPECT_EQ(out[0].metadata.at("note"), "x\xEF\xBF\xBD") << name;
    EXPECT_EQ(out[0].segments[1].response_ids, t.segments[1].response_ids) << "the ids are never touched";
  }
}

TEST(TrajectoryIo, BadFilesAreRejectedWithFileAndLine) {
  const test::TempDir temp;
  const std::filesystem::path dir = temp.path();
  const std::string path = (dir / "bad.jsonl").string();
  std::string text = to_jsonl({sample_trajectory()});
  text.insert(text.find('\n') + 1, "{\"rollout_id\": 5, \"bogus\": 1}\n");
  write_file_atomic(path, text);
  try {
    read_trajectories(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
  // A record whose loss mask disagrees with n_sampled.
  std::string wrong = to_jsonl({sample_trajectory()});
  const size_t at = wrong.find("\"n_sampled\":2");
  ASSERT_NE(at, std::string::npos) << wrong.substr(0, 400);
  wrong.replace(at, 13, "\"n_sampled\":9");
  write_file_atomic(path, wrong);
  EXPECT_THROW(read_trajectories(path), Error);
  write_file_atomic(path, std::string("\x01\x02garbage", 9));
  EXPECT_THROW(read_trajectories(path), Error);
  EXPECT_THROW(read_trajectories((dir / "missing.jsonl").string()), Error);
}

TEST(Trace, ShowsSegmentsTrainableTokensSummaryAndReward) {
  const Decoder decode = [](std::span<const TokenId> ids) {
    return "<" + std::to_string(ids.size()) + " ids>";
  };
  const std::string trace = format_trace(sample_trajectory(), decode);
  for (const char* part : {"reward 1", "compactions 2", "segment 1: summary", "summary: \"keep 7\"",
                           "[train] sampled x2", "environment x3", "not emitted", "N_after 5"}) {
    EXPECT_NE(trace.find(part), std::string::npos) << part << "\n" << trace;
  }
}

}  // namespace
}  // namespace crl
