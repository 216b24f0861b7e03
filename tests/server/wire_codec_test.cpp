// The request codec (issue 6): JSON with the .proto field names and binary protobuf decode to the same
// message; unknown fields and values of the wrong type are named with their path; encoding is deterministic;
// the fuzz target's seed corpus replays cleanly; invalid UTF-8 is repaired before it reaches an answer.
#include "wire/wire_codec.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "proto/checkpoint.pb.h"
#include "proto/compaction_cost.pb.h"
#include "proto/scenario.pb.h"
#include "proto/server.pb.h"
#include "tests/fuzz/corpus_replay.h"
#include "wire/api_error.h"
#include "wire/utf8.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote
int fuzz_request_decoder(const uint8_t* data, size_t size);

namespace {

ApiError decode_error(std::string_view body, WireFormat format, google::protobuf::Message& message) {
  try {
    decode_message(body, format, message);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "decoded: " << body;
  return ApiError(0, "", "");
}

TEST(WireCodec, JsonAndBinaryDecodeToTheSameMessage) {
  proto::StepRequest from_json;
  decode_message(
      R"({"episode_id":"ep-1","turn_id":3,"action":{"kind":"summary","text":"FACT 1","token_ids":[70,258],"logprobs":[-0.25,-1]}})",
      WireFormat::kJson, from_json);
  EXPECT_EQ(from_json.turn_id(), 3u);
  EXPECT_EQ(from_json.action().token_ids(1), 258);
  proto::StepRequest from_binary;
  decode_message(encode_message(from_json, WireFormat::kProtobuf), WireFormat::kProtobuf, from_binary);
  EXPECT_EQ(from_binary.SerializeAsString(), from_json.SerializeAsString());
  proto::StepRequest empty;
  decode_message("", WireFormat::kJson, empty);  // an empty JSON body reads as {}
  EXPECT_EQ(empty.turn_id(), 0u);
}

TEST(WireCodec, ErrorsNameTheFieldPath) {
  proto::BatchStepRequest batch;
  ApiError e = decode_error(R"({"steps":[{"turn_id":1},{"turn_id":-1}]})", WireFormat::kJson, batch);
  EXPECT_EQ(e.code(), "bad_field");
  EXPECT_EQ(e.field(), "steps[1].turn_id");
  e = decode_error(R"({"steps":[{"action":{"kind":"assistant","tokens":[1]}}]})", WireFormat::kJson, batch);
  EXPECT_EQ(e.code(), "unknown_field");
  EXPECT_EQ(e.field(), "steps[0].action.tokens");
  e = decode_error(R"({"steps":[{"turn_id":true}]})", WireFormat::kJson, batch);
  EXPECT_EQ(e.field(), "steps[0].turn_id");
  proto::CreateEpisodeRequest create;
  e = decode_error(R"({"env":"memory_chain","params":{"length":96}})", WireFormat::kJson, create);
  EXPECT_EQ(e.field(), "params.length");
  e = decode_error(R"({"env":"memory_chain","budget":{"capacity":3000000000}})", WireFormat::kJson, create);
  EXPECT_EQ(e.field(), "budget.capacity");
  e = decode_error(R"({"env":"memory_chain")", WireFormat::kJson, create);
  EXPECT_EQ(e.code(), "bad_json");
  e = decode_error(R"({"retry_after":1E400})", WireFormat::kJson, create);  // number overflow: a fuzz finding
  EXPECT_EQ(e.code(), "bad_json");
  EXPECT_EQ(e.http_status(), 400);
  e = decode_error(std::string("\x0a\x05"
                               "ab",
                               4),
                   WireFormat::kProtobuf, create);  // length past the end
  EXPECT_EQ(e.code(), "bad_protobuf");
  e = decode_error(std::string("\x0a\x02\x08\x01", 4), WireFormat::kProtobuf,
                   batch);  // steps[0].episode_id varint
  EXPECT_EQ(e.code(), "bad_field");
  EXPECT_EQ(e.field(), "steps[0].episode_id");
}

// Issue 14 item 1: {"env": [[[...]]]} 100,000 deep (200 KB, valid JSON of the wrong type) crashed the server
// (the error path dumped the value recursively). The depth limit holds before a DOM exists: a typed 400.
TEST(WireCodec, DeepNestingIsATyped400NotACrash) {
  proto::CreateEpisodeRequest create;
  const size_t depth = 100000;
  ApiError e = decode_error("{\"env\": " + std::string(depth, '[') + std::string(depth, ']') + "}",
                            WireFormat::kJson, create);
  EXPECT_EQ(e.http_status(), 400);
  EXPECT_EQ(e.code(), "json_too_deep");
  EXPECT_NE(std::string(e.what()).find("64"), std::string::npos) << e.what();
  EXPECT_TRUE(e.field().starts_with("env[0][0]")) << e.field();
  EXPECT_LT(std::string(e.what()).size(), 600u);
  // Within the limit but of the wrong type: bad_field, and the message quotes a short prefix only.
  e = decode_error("{\"env\": " + std::string(60, '[') + std::string(60, ']') + "}", WireFormat::kJson,
                   create);
  EXPECT_EQ(e.code(), "bad_field");
  EXPECT_EQ(e.field(), "env");
  EXPECT_LT(std::string(e.what()).size(), 300u);
  e = decode_error("{\"env\": [\"" + std::string(1 << 20, 'x') + "\"]}", WireFormat::kJson, create);
  EXPECT_EQ(e.code(), "bad_field");
  EXPECT_LT(std::string(e.what()).size(), 300u);
  // An unknown field with a huge name: named by a prefix.
  e = decode_error("{\"" + std::string(1 << 20, 'k') + "\": 1}", WireFormat::kJson, create);
  EXPECT_EQ(e.code(), "unknown_field");
  EXPECT_LT(std::string(e.what()).size() + e.field().size(), 1000u);
}

// Issue 14 item 5: a key repeated in an object (or one field named by its .proto and its JSON name) is a 400
// naming it; nlohmann kept the last value silently, other parsers keep the first.
TEST(WireCodec, DuplicateKeysAreATyped400) {
  proto::StepRequest step;
  ApiError e = decode_error(R"({"episode_id":"a","turn_id":1,"episode_id":"b"})", WireFormat::kJson, step);
  EXPECT_EQ(e.http_status(), 400);
  EXPECT_EQ(e.code(), "duplicate_key");
  EXPECT_EQ(e.field(), "episode_id");
  EXPECT_NE(std::string(e.what()).find("\"episode_id\""), std::string::npos) << e.what();
  proto::BatchStepRequest batch;
  e = decode_error(R"({"steps":[{"turn_id":1},{"action":{"kind":"assistant","kind":"summary"}}]})",
                   WireFormat::kJson, batch);
  EXPECT_EQ(e.code(), "duplicate_key");
  EXPECT_EQ(e.field(), "steps[1].action.kind");
  e = decode_error(R"({"turn_id":1,"turnId":2})", WireFormat::kJson, step);
  EXPECT_EQ(e.code(), "duplicate_key");
  EXPECT_EQ(e.field(), "turn_id");  // the object's keys are read in sorted order: "turnId" comes first
  proto::CreateEpisodeRequest create;
  e = decode_error(R"({"env":"memory_chain","params":{"length":"96","length":"4"}})", WireFormat::kJson,
                   create);
  EXPECT_EQ(e.code(), "duplicate_key");
  EXPECT_EQ(e.field(), "params.length");
}

TEST(WireCodec, EncodingIsDeterministicAndPrintsEveryField) {
  proto::CreateEpisodeRequest r;
  r.set_env("memory_chain");
  for (const char* key : {"zeta", "alpha", "mid", "beta", "omega"}) (*r.mutable_params())[key] = key;
  const std::string json = encode_message(r, WireFormat::kJson);
  EXPECT_NE(json.find("\"group_index\""), std::string::npos);  // defaults printed too
  EXPECT_LT(json.find("alpha"), json.find("zeta"));            // map keys sorted
  proto::CreateEpisodeRequest copy;
  decode_message(json, WireFormat::kJson, copy);
  EXPECT_EQ(encode_message(copy, WireFormat::kJson), json);
  EXPECT_EQ(encode_message(copy, WireFormat::kProtobuf), encode_message(r, WireFormat::kProtobuf));
}

// Protobuf's own JSON parser reads what our encoder writes, to the same message (floats, 64-bit integers as
// strings, NaN and infinities, escapes, maps, nested and repeated messages).
TEST(WireCodec, ProtobufReadsOurJson) {
  proto::ExportResponse e;
  e.set_episode_id("ep-\"quoted\"\\ \n\t\x01 \xc3\xa9");
  for (int s = 0; s < 2; ++s) {
    proto::Segment* seg = e.add_segments();
    seg->set_rollout_id("r");
    seg->set_group_index(-(int64_t{1} << 60));
    seg->set_n_after(~uint64_t{0});
    seg->set_reward(s ? std::nan("") : 0.1);
    seg->add_rollout_log_probs(-1.0f / 3.0f);
    seg->add_rollout_log_probs(std::numeric_limits<float>::infinity());
    seg->add_rollout_log_probs(-std::numeric_limits<float>::infinity());
    seg->add_rollout_log_probs(1e-40f);  // subnormal
    seg->add_prompt_ids(-7);
    seg->add_prompt_provenance(proto::COPIED_TAIL);
    (*seg->mutable_metadata())["b"] = "2";
    (*seg->mutable_metadata())["a"] = "1";
  }
  proto::StepRequest with_optional;
  with_optional.mutable_action()->set_kind("summary");
  for (const google::protobuf::Message* m :
       std::initializer_list<const google::protobuf::Message*>{&e, &with_optional}) {
    const std::string json = encode_message(*m, WireFormat::kJson);
    std::unique_ptr<google::protobuf::Message> theirs(m->New());
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, theirs.get()).ok()) << json;
    std::unique_ptr<google::protobuf::Message> ours(m->New());
    decode_message(json, WireFormat::kJson, *ours);
    EXPECT_EQ(encode_message(*theirs, WireFormat::kProtobuf), encode_message(*ours, WireFormat::kProtobuf));
    EXPECT_EQ(encode_message(*ours, WireFormat::kJson), json);
  }
  proto::CreateEpisodeRequest budget;
  decode_message(R"({"budget":{"capacity":512}})", WireFormat::kJson, budget);
  EXPECT_TRUE(budget.budget().has_capacity());
  EXPECT_FALSE(budget.budget().has_reserve());  // proto3 optional: absent stays absent
  EXPECT_EQ(encode_message(budget.budget(), WireFormat::kJson), R"({"capacity":512})");
}

// A float's negative zero keeps its sign through a JSON round trip: written "-0.0" (the shortest form "-0"
// is read as the integer 0 by every JSON reader; a fuzz finding, tests/fuzz/corpus/request_decoder).
TEST(WireCodec, NegativeZeroKeepsItsSign) {
  proto::StepRequest step;
  step.mutable_action()->add_logprobs(-0.0f);
  step.mutable_action()->add_logprobs(0.0f);
  const std::string json = encode_message(step, WireFormat::kJson);
  EXPECT_NE(json.find("\"logprobs\":[-0.0,0]"), std::string::npos) << json;
  proto::StepRequest back;
  decode_message(json, WireFormat::kJson, back);
  ASSERT_EQ(back.action().logprobs_size(), 2);
  EXPECT_TRUE(std::signbit(back.action().logprobs(0)));
  EXPECT_FALSE(std::signbit(back.action().logprobs(1)));
  EXPECT_EQ(encode_message(back, WireFormat::kJson), json);
  proto::StepRequest theirs;  // protobuf's own parser reads it as -0.0 too
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &theirs).ok());
  EXPECT_TRUE(std::signbit(theirs.action().logprobs(0)));
}

// Long repeated fields of every number type, written a chunk at a time (wire_codec.cpp's ChunkedText): what
// protobuf's own parser reads back is the message, bit for bit, across the chunks' boundaries.
TEST(WireCodec, LongRepeatedFieldsOfEveryTypeReadBackExactly) {
  std::mt19937_64 random(11);
  const auto bits = [&] { return random(); };
  proto::Segment segment;
  proto::scenario::Scenario scenario;
  proto::checkpoint::TabularState tabular;
  proto::compaction_cost::Sweep sweep;
  for (int i = 0; i < 3000; ++i) {
    segment.add_prompt_ids(i == 0 ? std::numeric_limits<int32_t>::min() : static_cast<int32_t>(bits()));
    segment.add_response_ids(i % 7 - 3);
    float f = 0;
    do {
      const uint32_t b = static_cast<uint32_t>(bits());
      std::memcpy(&f, &b, sizeof f);
    } while (std::isnan(f));
    segment.add_rollout_log_probs(i == 1 ? std::numeric_limits<float>::infinity() : f);
    segment.add_prompt_provenance(static_cast<proto::Provenance>(i / 500 % 6));  // runs of one value
    segment.add_response_provenance(static_cast<proto::Provenance>(bits() % 6));
    scenario.add_seeds(i == 2 ? std::numeric_limits<uint64_t>::max() : bits());
    double d = 0;
    do {
      const uint64_t b = bits();
      std::memcpy(&d, &b, sizeof d);
    } while (!std::isfinite(d));
    tabular.add_execute_logits(d);
    sweep.add_values(static_cast<int64_t>(bits()));
  }
  for (const google::protobuf::Message* m :
       std::initializer_list<const google::protobuf::Message*>{&segment, &scenario, &tabular, &sweep}) {
    const std::string json = encode_message(*m, WireFormat::kJson);
    ASSERT_GT(json.size(), 3 * 4096u) << m->GetDescriptor()->name();
    std::unique_ptr<google::protobuf::Message> theirs(m->New());
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, theirs.get()).ok()) << json.substr(0, 200);
    EXPECT_EQ(theirs->SerializeAsString(), m->SerializeAsString()) << m->GetDescriptor()->name();
  }
}

// proto3 enums are open: a number the schema does not name (a newer peer's value, kept by the binary parser)
// is written as the number, as protobuf's JSON mapping writes it, in a list and alone.
TEST(WireCodec, AnEnumNumberWithoutANameIsWrittenAsTheNumber) {
  proto::Segment segment;
  segment.add_prompt_provenance(proto::PROMPT);
  segment.add_prompt_provenance(static_cast<proto::Provenance>(9));
  segment.add_prompt_provenance(static_cast<proto::Provenance>(9));
  segment.add_prompt_provenance(proto::SAMPLED);
  segment.add_prompt_provenance(static_cast<proto::Provenance>(-3));
  segment.add_prompt_provenance(static_cast<proto::Provenance>(100));
  segment.add_prompt_provenance(proto::PROMPT);
  const std::string json = encode_message(segment, WireFormat::kJson);
  EXPECT_NE(json.find(R"("prompt_provenance":["PROMPT",9,9,"SAMPLED",-3,100,"PROMPT"])"), std::string::npos)
      << json;
  proto::Segment theirs;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &theirs).ok()) << json;
  EXPECT_EQ(theirs.SerializeAsString(), segment.SerializeAsString());
}

TEST(WireCodec, ContentTypes) {
  EXPECT_EQ(format_from_content_type(""), WireFormat::kJson);
  EXPECT_EQ(format_from_content_type("application/json; charset=utf-8"), WireFormat::kJson);
  EXPECT_EQ(format_from_content_type("Application/X-Protobuf"), WireFormat::kProtobuf);
  EXPECT_THROW(format_from_content_type("text/html"), ApiError);
  EXPECT_EQ(response_format("application/x-protobuf", WireFormat::kJson), WireFormat::kProtobuf);
  EXPECT_EQ(response_format("*/*", WireFormat::kProtobuf), WireFormat::kProtobuf);
}

TEST(WireCodec, InvalidUtf8IsReplaced) {
  EXPECT_EQ(valid_utf8("ok \xc3\xa9"), "ok \xc3\xa9");
  EXPECT_EQ(valid_utf8("a\xff"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  // One U+FFFD per maximal subpart: a sequence cut short is one, each byte of a surrogate is one.
  EXPECT_EQ(valid_utf8("\xe2\x82"), "\xEF\xBF\xBD");
  EXPECT_EQ(valid_utf8("\xe2\x82 x"), "\xEF\xBF\xBD x");
  EXPECT_EQ(valid_utf8("\xe2\x82\xe2\x82\xac"), "\xEF\xBF\xBD\xE2\x82\xAC");  // cut, then a whole euro sign
  EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(valid_utf8("\xf4\x90\x80\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // > U+10FFFF
  EXPECT_EQ(valid_utf8("\xf0\x9f\x98"), "\xEF\xBF\xBD");          // an emoji cut after three bytes
  EXPECT_TRUE(is_valid_utf8("plain"));
  EXPECT_TRUE(is_valid_utf8("\xf0\x9f\x98\x80 \xe2\x82\xac \xc3\xa9 \xf4\x8f\xbf\xbf"));
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));      // overlong
  EXPECT_FALSE(is_valid_utf8("\xe0\x80\xaf"));  // overlong
  EXPECT_FALSE(is_valid_utf8("\xf0\x9f\x98"));
  const ApiError e(400, "bad", "value \xff", "f\xfe");
  EXPECT_NO_THROW(encode_message(e.body(), WireFormat::kJson));
}

// The same replacement as nlohmann's dump with error_handler_t::replace (what the gateway's answers were
// written with, and the convention of Python's and browsers' decoders), on random bytes biased towards
// UTF-8's edges: lead bytes, continuation bytes, and the bytes that bound overlong forms and surrogates.
TEST(WireCodec, InvalidUtf8IsReplacedAsNlohmannReplacesIt) {
  static const unsigned char kBytes[] = {'a',  ' ',  0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0,
                                         0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0,
                                         0xF1, 0xF3, 0xF4, 0xF5, 0xFF, 0x82, 0xAC, 0x98, 0x80};
  std::mt19937_64 rng(20261205);
  int repaired = 0;
  for (int n = 0; n < 20000; ++n) {
    std::string text;
    const size_t size = rng() % 12;
    for (size_t i = 0; i < size; ++i) text += static_cast<char>(kBytes[rng() % std::size(kBytes)]);
    const std::string dumped =
        nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string expected = nlohmann::json::parse(dumped).get<std::string>();
    ASSERT_EQ(valid_utf8(text), expected)
        << nlohmann::json(text).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    ASSERT_EQ(is_valid_utf8(text), expected == text);
    repaired += expected != text;
  }
  EXPECT_GT(repaired, 10000);  // most strings needed a repair
}

TEST(WireCodec, FuzzSeedCorpusReplays) {
  EXPECT_GE(crl::testing::replay_corpus("request_decoder", fuzz_request_decoder), 10u);
}

}  // namespace
}  // namespace crl::server
