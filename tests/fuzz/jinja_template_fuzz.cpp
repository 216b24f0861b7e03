// libFuzzer target for the Jinja interpreter (engine/jinja/) as chat templates drive it: a template file is
// whatever a model repository ships (`--chat-template PATH`), so its source is untrusted input.
//
// Input: the template's source. It is parsed, then rendered twice over a conversation with every kind of
// message (system, user, an assistant turn with content, reasoning and tool calls, a tool result), tools,
// add_generation_prompt, bos/eos tokens and a thinking switch, under limits small enough for a fuzzer's pace
// (1 MB of output, 100,000 loop iterations and macro calls, 64 MB of work, 2 s). Properties: nothing crashes;
// parsing and rendering fail only with jinja::TemplateError; the two renders give the same text or the same
// error (a render has no state that outlives it), unless one ran into the wall clock, the one limit that is
// not a count.
//
// Built by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined; tests/fuzz/CMakeLists.txt) with
// CRL_LIBFUZZER defined; the engine tests compile the same function without it and replay the seed corpus
// (tests/fuzz/corpus/jinja_template).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engine/jinja/template.h"

namespace crl::jinja {

namespace {

const Dict& variables() {
  static const Dict vars = [] {
    const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "You are brief."},
      {"role": "user", "content": "List the files, then say done.\n"},
      {"role": "assistant", "content": "Listing.", "reasoning_content": "Use ls.",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "shell", "arguments": {"cmd": "ls -la", "timeout": 5}}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "shell", "content": "a.txt\nb.txt"},
      {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
      {"role": "user", "content": "\u00e9\u4e2d\ud83d\ude00 <|im_end|>"}])");
    const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([
      {"type": "function", "function": {"name": "shell", "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"},
                                                         "timeout": {"type": "integer"}},
                       "required": ["cmd"]}}}])");
    Dict d;
    d.set("messages", from_json(messages));
    d.set("tools", from_json(tools));
    d.set("add_generation_prompt", Value(true));
    d.set("bos_token", Value(std::string("<s>")));
    d.set("eos_token", Value(std::string("</s>")));
    d.set("enable_thinking", Value(false));
    return d;
  }();
  return vars;
}

// The render's text, or its error's message.
std::string render_or_error(const Template& t) {
  try {
    return "ok:" + t.render(variables(), 1'700'000'000);
  } catch (const TemplateError& e) {
    return std::string("error:") + e.what();
  }
}

}  // namespace

int fuzz_jinja_template(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  Limits limits;
  limits.max_output_bytes = 1u << 20;
  limits.max_loop_iterations = 100'000;
  limits.max_work_bytes = 64u << 20;
  limits.max_render_seconds = 2;
  std::optional<Template> t;
  try {
    t = Template::parse(source, "fuzz", limits);
  } catch (const TemplateError&) {
    return 0;
  }
  const std::string once = render_or_error(*t);
  const std::string twice = render_or_error(*t);
  const auto on_the_clock = [](const std::string& r) {
    return r.find("ran longer than") != std::string::npos;
  };
  if (twice != once && !on_the_clock(once) && !on_the_clock(twice)) {
    std::fprintf(stderr, "jinja_template: two renders of one template differ\n%.*s\n", static_cast<int>(size),
                 source.data());
    std::abort();
  }
  return 0;
}

}  // namespace crl::jinja

#ifdef CRL_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return crl::jinja::fuzz_jinja_template(data, size);
}
#endif
