// The batch: the converter from engine trajectories, validation, and the JSON reader/writer of
// `crl advantages` (every bad input names the rollout, the segment and the field).
#include "learners/batch_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "learners/batch.h"

namespace crl::learners {
namespace {

const char* kGood = R"({"gamma": 1.0, "lambda": "adaptive", "correction": true, "critic_target": "local",
  "rollouts": [{"reward": 1.0, "segments": [
    {"kind": "execution", "values": [0.5, 9.0, 0.25], "actor_mask": [1, 0, 1], "critic_mask": [1, 0, 1]},
    {"kind": "summary", "values": [0.8], "actor_mask": [1], "critic_mask": [1]}]}]})";

TEST(LearnerBatchJsonTest, ParsesAndWritesTheDocumentedFormat) {
  const AdvantagesRequest req = parse_advantages_request(kGood, "batch.json");
  EXPECT_EQ(req.batch.num_rollouts(), 1);
  EXPECT_EQ(req.batch.num_segments(), 2);
  EXPECT_EQ(req.batch.num_tokens(), 4);
  EXPECT_EQ(req.options.lambda_mode, LambdaMode::kAdaptive);
  const Advantages a = Learner(req.options).advantages(req.batch);
  const nlohmann::json out =
      nlohmann::json::parse(format_advantages_result(req, a, compute_diagnostics(req.batch, a)));
  const auto& s0 = out["rollouts"][0]["segments"][0];
  EXPECT_EQ(s0["n_sampled"], 2);
  EXPECT_EQ(s0["n_after"], 1);
  EXPECT_NEAR(s0["lambda"].get<double>(), 2.0 / 3.0, 1e-15);
  EXPECT_EQ(s0["advantages"].size(), 3u);
  EXPECT_NEAR(s0["advantages"][0].get<double>(), 1.0 / 6.0, 1e-15);
  EXPECT_EQ(s0["returns"][1].get<double>(), 9.0);
  EXPECT_EQ(out["rollouts"][0]["segments"][1]["kind"], "summary");
  EXPECT_TRUE(out["diagnostics"]["boundary_value_gap"].contains("execution->summary"));
}

TEST(LearnerBatchJsonTest, FixedLambdaAndCriticTargets) {
  nlohmann::json doc = nlohmann::json::parse(kGood);
  doc["lambda"] = 0.8;
  doc["critic_target"] = "stitched";
  doc["correction"] = false;
  const AdvantagesRequest req = parse_advantages_request(doc.dump(), "b.json");
  EXPECT_EQ(req.options.lambda_mode, LambdaMode::kFixed);
  EXPECT_EQ(req.options.lambda, 0.8);
  EXPECT_EQ(req.options.critic_target, CriticTarget::kStitched);
  EXPECT_FALSE(req.options.correction);
  EXPECT_EQ(req.options.correction_segments, CorrectionSegments::kAll);
  for (const auto& [name, kind] :
       {std::pair{"execution", CorrectionSegments::kExecution},
        std::pair{"summary", CorrectionSegments::kSummary}, std::pair{"all", CorrectionSegments::kAll}}) {
    doc["correction_segments"] = name;
    const AdvantagesRequest r = parse_advantages_request(doc.dump(), "b.json");
    EXPECT_EQ(r.options.correction_segments, kind);
    const Advantages a = Learner(r.options).advantages(r.batch);
    EXPECT_EQ(nlohmann::json::parse(
                  format_advantages_result(r, a, compute_diagnostics(r.batch, a)))["correction_segments"],
              name);
  }
  doc.erase("correction_segments");
  doc.erase("rollouts");
  doc["rollouts"] = nlohmann::json::array();
  doc["rollouts"].push_back(
      {{"reward", 0.0}, {"segments", {{{"kind", "execution"}, {"values", {0.1}}, {"actor_mask", {true}}}}}});
  const AdvantagesRequest r2 = parse_advantages_request(doc.dump(), "b.json");
  EXPECT_EQ(r2.batch.critic_mask, std::vector<uint8_t>{1});  // critic mask defaults to the actor mask
}

// Each bad document fails with an error naming the field path (which contains the rollout and segment).
void expect_error(const nlohmann::json& doc, const std::string& field, const std::string& words) {
  try {
    parse_advantages_request(doc.dump(), "batch.json");
    FAIL() << "expected an error on " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_EQ(e.where(), "batch.json");
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(LearnerBatchJsonTest, BadInputNamesRolloutSegmentAndField) {
  const nlohmann::json good = nlohmann::json::parse(kGood);
  nlohmann::json d = good;
  d["rollouts"][0]["segments"][1].erase("values");
  expect_error(d, "rollouts[0].segments[1].values", "missing");
  d = good;
  d["rollouts"][0]["segments"][0]["values"] = "oops";
  expect_error(d, "rollouts[0].segments[0].values", "expected an array");
  d = good;
  d["rollouts"][0]["segments"][0]["values"][1] = "x";
  expect_error(d, "rollouts[0].segments[0].values[1]", "expected a number");
  d = good;
  d["rollouts"][0]["segments"][0]["actor_mask"] = {1, 1};
  expect_error(d, "rollouts[0].segments[0].actor_mask", "one per response token");
  d = good;
  d["rollouts"][0]["segments"][1]["critic_mask"] = {1, 0};
  expect_error(d, "rollouts[0].segments[1].critic_mask", "one per response token");
  d = good;
  d["rollouts"][0]["segments"][0]["actor_mask"][0] = 2;
  expect_error(d, "rollouts[0].segments[0].actor_mask[0]", "expected 0 or 1");
  d = good;
  d["rollouts"][0]["segments"][0]["kind"] = "planning";
  expect_error(d, "rollouts[0].segments[0].kind", "expected \"execution\" or \"summary\"");
  d = good;
  d["rollouts"][0].erase("reward");
  expect_error(d, "rollouts[0].reward", "missing");
  d = good;
  d["rollouts"][0]["reward"] = true;
  expect_error(d, "rollouts[0].reward", "expected a number");
  d = good;
  d["lambda"] = "vapo";
  expect_error(d, "lambda", "adaptive");
  d = good;
  d["critic_target"] = "global";
  expect_error(d, "critic_target", "local");
  d = good;
  d["correction_segments"] = "executions";
  expect_error(d, "correction_segments", "\"executions\", expected \"all\", \"execution\" or \"summary\"");
  d["correction_segments"] = 1;
  expect_error(d, "correction_segments", "expected a string");
  d = good;
  d["gamma"] = 2.0;
  expect_error(d, "gamma", "[0, 1]");
  d = good;
  d["rollouts"][0]["segments"][0]["logprobz"] = {0.0};
  expect_error(d, "rollouts[0].segments[0].logprobz", "not a known field");
  d = good;
  d.erase("rollouts");
  expect_error(d, "rollouts", "missing");
  EXPECT_THROW(parse_advantages_request("{not json", "batch.json"), Error);
}

Trajectory two_segment_trajectory() {
  Trajectory tr;
  tr.rollout_id = "t0";
  tr.reward = 1.0;
  Segment e;
  e.kind = SegmentKind::kExecution;
  e.response_ids = {1, 2, 3};
  e.response_provenance = {Provenance::kSampled, Provenance::kEnvironment, Provenance::kSampled};
  e.actor_mask = {1, 0, 1};
  e.critic_mask = {1, 0, 1};
  e.logprobs = {-0.5f, 0.0f, -0.25f};
  e.values = {0.5f, 0.0f, 0.25f};
  Segment s;
  s.kind = SegmentKind::kSummary;
  s.response_ids = {4};
  s.response_provenance = {Provenance::kSampled};
  s.actor_mask = {1};
  s.critic_mask = {1};
  s.logprobs = {-1.0f};
  s.values = {};  // no values recorded: zeros
  tr.segments = {e, s};
  return tr;
}

// Issue 14 items 1 and 5: batch files go through the shared JSON reader.
TEST(LearnerBatchJsonTest, DuplicateKeysAndDeepNestingAreRefused) {
  try {
    parse_advantages_request(R"({"gamma":0.5,"rollouts":[],"gamma":0.9})", "batch.json");
    ADD_FAILURE() << "a repeated key was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "batch.json");
    EXPECT_EQ(e.field(), "gamma");
    EXPECT_NE(e.message().find("duplicate key \"gamma\""), std::string::npos) << e.what();
  }
  try {
    parse_advantages_request("{\"rollouts\":" + std::string(100000, '[') + std::string(100000, ']') + "}",
                             "batch.json");
    ADD_FAILURE() << "100,000 levels were accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("nested deeper than 64"), std::string::npos) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 600u);
  }
}

TEST(LearnerBatchTest, MakeBatchFlattensTrajectories) {
  const Batch b = make_batch({two_segment_trajectory(), two_segment_trajectory()});
  EXPECT_EQ(b.num_rollouts(), 2);
  EXPECT_EQ(b.num_segments(), 4);
  EXPECT_EQ(b.num_tokens(), 8);
  EXPECT_EQ(b.segment_offsets, (std::vector<int64_t>{0, 3, 4, 7, 8}));
  EXPECT_EQ(b.rollout_offsets, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(b.values[2], 0.25);
  EXPECT_EQ(b.values[3], 0.0);
  EXPECT_EQ(b.old_logprobs[3], -1.0);
  EXPECT_EQ(b.kind[3], SegmentKind::kSummary);
  EXPECT_EQ(b.rollout_ids[1], "t0");
}

TEST(LearnerBatchTest, MakeBatchRejectsMismatchedLengths) {
  Trajectory tr = two_segment_trajectory();
  tr.segments[1].critic_mask = {1, 1};
  try {
    make_batch({tr});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "critic_mask");
    EXPECT_NE(e.where().find("segment 1"), std::string::npos) << e.what();
  }
}

TEST(LearnerBatchTest, ValidateRejectsBrokenOffsets) {
  Batch b;
  b.begin_rollout(1.0);
  b.add_segment(SegmentKind::kExecution, {0.1, 0.2}, {1, 1}, {1, 1});
  b.segment_offsets.back() = 5;
  EXPECT_THROW(b.validate(), Error);
  Batch c;
  c.begin_rollout(1.0);
  c.add_segment(SegmentKind::kExecution, {0.1, 0.2}, {1, 1}, {1, 1});
  c.new_logprobs = {0.0};
  try {
    c.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "new_logprobs");
  }
}

}  // namespace
}  // namespace crl::learners
