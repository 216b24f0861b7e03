// Message keys (server/gateway/chat_messages.h): tool-call arguments are compared by their JSON structure,
// exactly as equal as nlohmann's canonical dump of them (what the keys were computed from before).
#include "server/gateway/chat_messages.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace crl::server::gateway {
namespace {

using nlohmann::json;

uint64_t key_with_arguments(const std::string& arguments) {
  Message message;
  message.role = MessageRole::kAssistant;
  message.content = "calling";
  message.tool_calls.push_back(ToolCall{"call_1", "shell", arguments});
  return message_key(message);
}

TEST(ChatMessages, ToolCallArgumentsAreComparedAsJson) {
  EXPECT_EQ(key_with_arguments(R"({"a":1,"b":[true,null]})"),
            key_with_arguments(R"( { "b" : [ true , null ] , "a" : 1 } )"));
  EXPECT_EQ(key_with_arguments(R"({"s":"\u00e9"})"), key_with_arguments(R"({"s":"é"})"));
  EXPECT_EQ(key_with_arguments(R"([0])"), key_with_arguments(R"([-0])"));  // both dump as 0
  EXPECT_NE(key_with_arguments(R"({"a":1})"), key_with_arguments(R"({"a":1.0})"));
  EXPECT_NE(key_with_arguments(R"({"a":1})"), key_with_arguments(R"({"a":"1"})"));
  EXPECT_NE(key_with_arguments(R"({"a":[1,2]})"), key_with_arguments(R"({"a":[2,1]})"));
  EXPECT_NE(key_with_arguments(R"({"a":{}})"), key_with_arguments(R"({"a":[]})"));
  // Not JSON: compared as text, and never equal to a JSON text.
  EXPECT_EQ(key_with_arguments("ls -la"), key_with_arguments("ls -la"));
  EXPECT_NE(key_with_arguments("ls -la"), key_with_arguments("ls  -la"));
  EXPECT_NE(key_with_arguments(R"("x")"), key_with_arguments("x"));
  // Tool call ids are ours to invent: left out of the key.
  Message a, b;
  a.role = b.role = MessageRole::kAssistant;
  a.tool_calls.push_back(ToolCall{"call_1", "f", "{}"});
  b.tool_calls.push_back(ToolCall{"other", "f", "{}"});
  EXPECT_EQ(message_key(a), message_key(b));
}

// Keys are equal exactly when nlohmann's dumps of the arguments are, over generated argument texts.
TEST(ChatMessages, ArgumentKeysAgreeWithNlohmannsCanonicalDump) {
  std::mt19937_64 rng(18);
  const std::vector<std::string> atoms = {"0",    "-0",    "1",     "1.0",   "1e0",
                                          "-1",   "2.5",   "\"x\"", "\"é\"", "\"\\u00e9\"",
                                          "true", "false", "null",  "[]",    "{}"};
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) {
    std::string text = "{";
    const int n = static_cast<int>(rng() % 3);
    std::vector<std::string> keys = {"a", "b", "c"};
    std::shuffle(keys.begin(), keys.end(), rng);
    for (int k = 0; k < n; ++k) {
      if (k) text += rng() % 2 ? ", " : ",";
      text += "\"" + keys[static_cast<size_t>(k)] + "\":" + atoms[rng() % atoms.size()];
    }
    texts.push_back(text + "}");
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    for (size_t j = i; j < std::min(texts.size(), i + 40); ++j) {
      const bool same_dump = json::parse(texts[i]).dump() == json::parse(texts[j]).dump();
      EXPECT_EQ(key_with_arguments(texts[i]) == key_with_arguments(texts[j]), same_dump)
          << texts[i] << " vs " << texts[j];
    }
  }
}

// Long contents go through the hash's four-lane bulk path: every byte, in the bulk and in the tail, and the
// length count (a history edit anywhere in a long message must be seen).
TEST(ChatMessages, EveryByteOfALongContentCountsInItsKey) {
  Message message;
  message.role = MessageRole::kUser;
  for (const size_t length : {63, 64, 65, 95, 96, 97, 300}) {
    message.content.assign(length, 'x');
    const uint64_t key = message_key(message);
    EXPECT_EQ(message_key(message), key);
    std::set<uint64_t> seen = {key};
    for (size_t at = 0; at < length; ++at) {
      message.content[at] = 'y';
      EXPECT_TRUE(seen.insert(message_key(message)).second) << "length " << length << ", byte " << at;
      message.content[at] = 'x';
    }
    message.content += '\0';  // one more (zero) byte: a different length, a different key
    EXPECT_NE(message_key(message), key) << "length " << length;
  }
}

}  // namespace
}  // namespace crl::server::gateway
