// The request codec (issue 6): JSON with the .proto field names and binary protobuf decode to the same
// message; unknown fields and values of the wrong type are named with their path; encoding is deterministic;
// the fuzz target's seed corpus replays cleanly; invalid UTF-8 is repaired before it reaches an answer.
#include "server/wire_codec.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/api_error.h"
#include "server/utf8.h"

namespace crl::server {
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
  EXPECT_EQ(valid_utf8("\xe2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // truncated sequence
  EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_TRUE(is_valid_utf8("plain"));
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));  // overlong
  const ApiError e(400, "bad", "value \xff", "f\xfe");
  EXPECT_NO_THROW(encode_message(e.body(), WireFormat::kJson));
}

TEST(WireCodec, FuzzSeedCorpusReplays) {
  const std::filesystem::path dir =
      std::filesystem::path(CRL_SOURCE_DIR) / "tests/fuzz/corpus/request_decoder";
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    const std::string data = bytes.str();
    EXPECT_EQ(fuzz_request_decoder(reinterpret_cast<const uint8_t*>(data.data()), data.size()), 0);
    ++files;
  }
  EXPECT_GE(files, 10u);
}

}  // namespace
}  // namespace crl::server
