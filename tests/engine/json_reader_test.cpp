// The shared JSON reader (issue 14 items 1 and 5): the nesting limit holds before a DOM exists (a document
// 100,000 levels deep is a typed error, not a stack overflow), a repeated key is a typed error naming it,
// syntax errors and previews quote a short prefix only, and what it accepts reads as nlohmann reads it.
#include "engine/json_reader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/tokenizer.h"
#include "engine/trajectory_io.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

using nlohmann::json;

std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

JsonError read_error(const std::string& text) {
  try {
    read_json(text, "doc.json");
  } catch (const JsonError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << text.substr(0, 200);
  return JsonError(JsonErrorKind::kSyntax, "", "", "");
}

TEST(JsonReader, ReadsWhatNlohmannReads) {
  for (const char* text : {R"({"a":[1,2.5,-3,"x\u00e9",true,false,null,{"b":{}}],"c":18446744073709551615})",
                           "[]", "  \"s\"  ", "0", "[[[]],[{}]]", R"({"":{"":[]}})"}) {
    EXPECT_EQ(read_json(text, "t"), json::parse(text)) << text;
  }
}

TEST(JsonReader, NestingDeeperThanTheLimitIsATypedError) {
  EXPECT_EQ(read_json(nested_arrays(kMaxJsonDepth), "t"), json::parse(nested_arrays(kMaxJsonDepth)));
  JsonError e = read_error(nested_arrays(kMaxJsonDepth + 1));
  EXPECT_EQ(e.kind(), JsonErrorKind::kTooDeep);
  EXPECT_EQ(e.code(), "json_too_deep");
  EXPECT_NE(e.message().find("64"), std::string::npos) << e.message();
  EXPECT_EQ(e.where(), "doc.json");
  // 100,000 levels (200 KB): refused at level 65, with a short message.
  e = read_error(nested_arrays(100000));
  EXPECT_EQ(e.kind(), JsonErrorKind::kTooDeep);
  EXPECT_LT(std::string(e.what()).size(), 600u);
  // Unterminated: the limit is met before the end, whatever follows.
  EXPECT_EQ(read_error(std::string(100000, '[')).kind(), JsonErrorKind::kTooDeep);
  // Objects count as levels too; the error names the path to the level that broke the limit.
  std::string objects;
  for (int i = 0; i < 70; ++i) objects += "{\"k\":";
  objects += "1" + std::string(70, '}');
  e = read_error(objects);
  EXPECT_EQ(e.kind(), JsonErrorKind::kTooDeep);
  EXPECT_TRUE(e.field().starts_with("k.k.k")) << e.field();
  e = read_error(R"({"env":[[3],)" + nested_arrays(100) + "]}");
  EXPECT_TRUE(e.field().starts_with("env[1][0][0]")) << e.field();
  // A lower limit for a caller that wants one.
  EXPECT_THROW(read_json("[[[1]]]", "t", 2), JsonError);
  EXPECT_NO_THROW(read_json("[[1]]", "t", 2));
}

TEST(JsonReader, DuplicateKeysAreATypedErrorNamingTheKey) {
  JsonError e = read_error(R"({"a":1,"b":2,"a":3})");
  EXPECT_EQ(e.kind(), JsonErrorKind::kDuplicateKey);
  EXPECT_EQ(e.code(), "duplicate_key");
  EXPECT_EQ(e.field(), "a");
  EXPECT_NE(e.message().find("\"a\""), std::string::npos) << e.message();
  e = read_error(R"({"x":[{"k":1},{"k":2,"k":3}]})");
  EXPECT_EQ(e.field(), "x[1].k");
  // The same key in different objects is fine; so is a key equal to a value.
  EXPECT_NO_THROW(read_json(R"({"a":{"a":"a"},"b":[{"a":1},{"a":2}]})", "t"));
  // A long repeated key is quoted by a prefix.
  const std::string key(100000, 'k');
  e = read_error("{\"" + key + "\":1,\"" + key + "\":2}");
  EXPECT_LT(std::string(e.what()).size(), 400u);
}

TEST(JsonReader, SyntaxErrorsAreShortAndNameTheOffset) {
  JsonError e = read_error("{\"a\":");
  EXPECT_EQ(e.kind(), JsonErrorKind::kSyntax);
  EXPECT_EQ(e.code(), "bad_json");
  EXPECT_NE(e.message().find("not valid JSON (byte"), std::string::npos) << e.message();
  // A long string with a raw control character at its end: nlohmann's message holds the whole token.
  e = read_error("[\"" + std::string(1 << 20, 'x') + "\n\"]");
  EXPECT_LT(std::string(e.what()).size(), 400u);
  EXPECT_EQ(read_error(R"({"n":1E400})").kind(), JsonErrorKind::kSyntax);  // out of range
  EXPECT_EQ(read_error("[1] [2]").kind(), JsonErrorKind::kSyntax);         // one value only
  EXPECT_EQ(read_error("").kind(), JsonErrorKind::kSyntax);
  EXPECT_EQ(read_error("\"\xff\"").kind(), JsonErrorKind::kSyntax);  // invalid UTF-8
}

TEST(JsonReader, PreviewsAreBounded) {
  EXPECT_EQ(json_preview(json::parse(R"({"a":[1,"b"]})")), R"({"a":[1,"b"]})");
  EXPECT_EQ(json_preview(json("short")), "\"short\"");
  EXPECT_LE(json_preview(json(std::string(1 << 20, 'x')), 60).size(), 70u);
  json big = json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  EXPECT_LE(json_preview(big, 60).size(), 80u);
  // Deep documents built in code (not by read_json) stop at the limit too.
  json deep = json::array();
  for (int i = 0; i < 10000; ++i) deep = json::array({std::move(deep)});
  EXPECT_LE(json_preview(deep, 60).size(), 80u);
  // Cut on a character boundary.
  EXPECT_EQ(text_prefix("\xc3\xa9\xc3\xa9", 3), "\xc3\xa9...");
  EXPECT_EQ(text_prefix("abc", 3), "abc");
}

// The engine's own readers use it: tokenizer.json files and trajectory exports (crl inspect).
TEST(JsonReader, TokenizerFilesAndTrajectoryExportsUseIt) {
  namespace fs = std::filesystem;
  const test::TempDir temp;
  const fs::path dir = temp.path();
  auto error_of = [&](const std::string& name, const std::string& content, auto&& read) -> std::string {
    const std::string file = (dir / name).string();
    std::ofstream(file, std::ios::binary) << content;
    try {
      read(file);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
      return e.what();
    }
    ADD_FAILURE() << name << " was accepted";
    return "";
  };
  const auto tokenizer = [](const std::string& file) { make_tokenizer(file); };
  std::string e = error_of("dup.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "a": 1}}})", tokenizer);
  EXPECT_NE(e.find("duplicate key \"a\" at model.vocab.a"), std::string::npos) << e;
  e = error_of("deep.json", "{\"added_tokens\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
               tokenizer);
  EXPECT_NE(e.find("nested deeper than 64"), std::string::npos) << e.substr(0, 300);
  EXPECT_LT(e.size(), 800u);
  const auto trajectories = [](const std::string& file) { read_trajectories(file); };
  e = error_of("dup.jsonl", "{\"rollout_id\": \"a\", \"rollout_id\": \"b\"}\n", trajectories);
  EXPECT_NE(e.find("duplicate key \"rollout_id\""), std::string::npos) << e;
}

}  // namespace
}  // namespace crl
