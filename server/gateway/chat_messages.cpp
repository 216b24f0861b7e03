#include "server/gateway/chat_messages.h"

#include <algorithm>
#include <cstring>

#include "engine/json_view.h"
#include "engine/rng.h"

namespace crl::server::gateway {

using nlohmann::ordered_json;  // tool calls keep their keys in the order written

namespace {

// The keys only recognise a session's own history (a harness that found a collision could confuse only its
// own session), so a fast non-cryptographic hash will do, with no copy of the text (SHA-256 over a canonical
// copy cost about 50 us for an 8 KB history on every call: bench/RESULTS.md, gateway). Every message of the
// history is hashed on every call, so the bulk of a long field goes through four independent lanes of
// xxHash64's round (multiply, rotate, multiply: the lanes overlap in the pipeline, about a byte per cycle),
// folded into two SplitMix64 lanes that also take the short fields and the tail word by word.
class KeyHasher {
 public:
  void add(uint64_t value) {
    a_ = splitmix64(a_ ^ value);
    b_ = splitmix64(b_ + value + 0x632BE59BD9B4E019ull);
  }
  void add_field(std::string_view field) {  // length-prefixed: no two field lists hash the same way
    add(field.size());
    size_t i = 0;
    if (field.size() >= 64) {
      constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full;
      const auto round = [](uint64_t lane, uint64_t word) {
        lane += word * kP2;
        return ((lane << 31) | (lane >> 33)) * kP1;
      };
      uint64_t lane[4] = {a_ + kP1 + kP2, b_ + kP2, a_ ^ b_, b_ - kP1};
      for (; i + 32 <= field.size(); i += 32) {
        uint64_t words[4];
        std::memcpy(words, field.data() + i, 32);
        for (int k = 0; k < 4; ++k) lane[k] = round(lane[k], words[k]);
      }
      for (const uint64_t l : lane) add(l);
    }
    for (; i + 8 <= field.size(); i += 8) {
      uint64_t word;
      std::memcpy(&word, field.data() + i, 8);
      add(word);
    }
    uint64_t word = 0;
    std::memcpy(&word, field.data() + i, field.size() - i);
    add(word);
  }
  uint64_t value() const { return a_ ^ splitmix64(b_); }
  // A JSON value by its structure, so that {"a":1} and { "a": 1 } (or keys in another order) are the same
  // call: object members in key order, integers by value whatever their sign's type, doubles by their bits.
  // Two texts hash the same exactly when nlohmann's canonical dump of them is the same text (what the
  // key was computed from before: parsing and dumping every tool call of the history on every call with
  // nlohmann cost more than the rest of the keys).
  void add_json(JsonView value) {
    enum Tag : uint64_t { kNull = 1, kFalse, kTrue, kInt, kUint, kDouble, kString, kArray, kObject };
    switch (value.type()) {
      case JsonType::kNull:
        return add(kNull);
      case JsonType::kBool:
        return add(value.boolean() ? kTrue : kFalse);
      case JsonType::kNumber:
        if (value.number_kind() == JsonNumberKind::kFloat) {
          const double d = value.number();
          uint64_t bits;
          std::memcpy(&bits, &d, 8);
          add(kDouble);
          return add(bits);
        }
        if (value.number_kind() == JsonNumberKind::kUnsigned && value.integer() < 0) {
          add(kUint);  // above INT64_MAX
        } else {
          add(kInt);
        }
        return add(static_cast<uint64_t>(value.integer()));
      case JsonType::kString:
        add(kString);
        return add_field(value.string());
      case JsonType::kArray:
        add(kArray);
        add(value.size());
        for (const JsonView element : value) add_json(element);
        return;
      case JsonType::kObject: {
        add(kObject);
        add(value.size());
        std::vector<JsonView> members(value.begin(), value.end());
        std::sort(members.begin(), members.end(),
                  [](const JsonView& x, const JsonView& y) { return x.key() < y.key(); });
        for (const JsonView member : members) {
          add_field(member.key());
          add_json(member);
        }
        return;
      }
    }
  }
  // Tool-call arguments: by structure when they are JSON, else as text (tagged apart).
  void add_arguments(const std::string& arguments) {
    try {
      const JsonDocument doc = JsonDocument::parse(arguments, "tool call arguments");
      add(1);
      add_json(doc.root());
    } catch (const JsonError&) {
      add(2);
      add_field(arguments);
    }
  }

 private:
  uint64_t a_ = 0x243F6A8885A308D3ull, b_ = 0x13198A2E03707344ull;
};

uint64_t key_of(MessageRole role, std::string_view content, const std::vector<ToolCall>& calls,
                std::string_view tool_call_id) {
  KeyHasher h;
  h.add(static_cast<uint64_t>(role));
  h.add_field(content);
  h.add(calls.size());
  for (const ToolCall& call : calls) {
    h.add_field(call.name);
    h.add_arguments(call.arguments);
  }
  h.add_field(tool_call_id);
  return h.value();
}

}  // namespace

std::string_view trim_blanks(std::string_view text) {
  while (!text.empty() && (text.front() == '\n' || text.front() == ' ')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  return text;
}

uint64_t message_key(const Message& message) {
  return key_of(message.role, message.content, message.tool_calls, message.tool_call_id);
}

uint64_t reply_key(const AssistantReply& reply) {
  return key_of(MessageRole::kAssistant, reply.content, reply.tool_calls, "");
}

nlohmann::json tool_input(const ToolCall& call) {
  nlohmann::json input = nlohmann::json::parse(call.arguments, nullptr, false);
  return input.is_object() ? input : nlohmann::json::object();
}

uint64_t anthropic_reply_key(const AssistantReply& reply) {
  AssistantReply answered = reply;
  for (ToolCall& call : answered.tool_calls) call.arguments = tool_input(call).dump();
  return reply_key(answered);
}

uint64_t tools_key(const nlohmann::ordered_json& tools) {
  if (tools.is_null() || (tools.is_array() && tools.empty())) return 0;
  KeyHasher h;
  h.add_field(tools.dump());
  return h.value() | 1;  // never 0 (no tools)
}

std::string assistant_text(std::string_view content, const std::vector<ToolCall>& calls) {
  std::string out(content);
  for (const ToolCall& call : calls) {
    if (!out.empty()) out += '\n';
    ordered_json arguments = ordered_json::parse(call.arguments, nullptr, false);
    if (arguments.is_discarded()) arguments = call.arguments;
    out += "<tool_call>\n{\"name\": " + ordered_json(call.name).dump() +
           ", \"arguments\": " + arguments.dump() + "}\n</tool_call>";
  }
  return out;
}

AssistantReply parse_reply(std::string_view text, const std::string& id_prefix) {
  static constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  AssistantReply reply;
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kOpen, at);
    if (open == std::string_view::npos) break;
    const size_t close = text.find(kClose, open + kOpen.size());
    if (close == std::string_view::npos) break;
    const std::string_view inside =
        trim_blanks(text.substr(open + kOpen.size(), close - open - kOpen.size()));
    const ordered_json call = ordered_json::parse(inside, nullptr, false);
    if (call.is_object() && call.contains("name") && call["name"].is_string()) {
      content += text.substr(at, open - at);
      ToolCall parsed;
      parsed.id = "call_" + id_prefix + "_" + std::to_string(reply.tool_calls.size());
      parsed.name = call["name"].get<std::string>();
      const auto arguments = call.find("arguments");
      parsed.arguments = arguments == call.end()  ? "{}"
                         : arguments->is_string() ? arguments->get<std::string>()
                                                  : arguments->dump();
      reply.tool_calls.push_back(std::move(parsed));
    } else {
      content += text.substr(at, close + kClose.size() - at);  // not a call: it stays text
    }
    at = close + kClose.size();
  }
  content += text.substr(std::min(at, text.size()));
  reply.content = reply.tool_calls.empty() ? std::string(text) : std::string(trim_blanks(content));
  return reply;
}

std::string tools_system_block(const nlohmann::ordered_json& tools) {
  if (!tools.is_array() || tools.empty()) return "";
  std::string out =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
      "function signatures within <tools></tools> XML tags:\n<tools>";
  for (const auto& tool : tools) out += "\n" + tool.dump();
  out +=
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call>";
  return out;
}

}  // namespace crl::server::gateway
