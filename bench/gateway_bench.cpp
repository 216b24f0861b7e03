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
// Counters: p50_us, p99_us per call; for the gateway, added_p50_us / added_p99_us = its percentile minus the
// direct call's of BM_DirectUpstream (run just before), same_p50_us = the p50 of the interleaved direct
// calls with the gateway's own requests, and pair_added_p50_us / pair_added_p99_us = the percentiles of
// (gateway call - its direct twin), the overhead with the machine's load drift taken out. Items = calls.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "server/gateway/gateway.h"
#include "tests/policies/llm/scripted_llm_server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace {

using namespace crl;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kContext = 8000;

struct Stack {
  Stack() {
    testing::ScriptedLlmOptions llm;
    llm.log_calls = true;  // the gateway bench replays each forwarded request directly (cleared per call)
    llm.script = [](std::string_view, uint64_t) { return std::string("ok, next step"); };
    upstream = std::make_unique<testing::ScriptedLlmServer>(llm);
    server::gateway::GatewayOptions options;
    options.upstream.base_url = upstream->url();
    options.budget = Budget{65536, 16384, 2, 1024, 1024, 8};
    gateway = std::make_unique<server::gateway::Gateway>(options, nullptr);
    server::HttpOptions http;
    http.gateway = gateway.get();
    http.max_body_bytes = 64u << 20;
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

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

double direct_p50 = 0, direct_p99 = 0;

void BM_DirectUpstream(benchmark::State& state) {
  Stack& s = stack();
  server::testing::HttpClient client(s.upstream->port());
  json ids = json::array();
  for (size_t i = 0; i < kContext; ++i) ids.push_back(97 + static_cast<int>(i % 26));
  const std::string body = json{
      {"input_ids", ids},
      {"sampling_params", {{"max_new_tokens", 64}, {"temperature", 1.0}, {"stop_token_ids", {258}}}},
      {"return_logprob", true},
      {"rid", "bench"}}.dump();
  std::vector<double> seconds;
  for (auto _ : state) {
    const Clock::time_point start = Clock::now();
    const auto reply = client.call("POST", "/generate", body);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (reply.status != 200) state.SkipWithError("upstream call failed");
  }
  direct_p50 = percentile(seconds, 0.5);
  direct_p99 = percentile(seconds, 0.99);
  state.counters["p50_us"] = direct_p50 * 1e6;
  state.counters["p99_us"] = direct_p99 * 1e6;
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DirectUpstream)->UseRealTime()->MinTime(1.0);

void BM_GatewayChatTurn(benchmark::State& state) {
  Stack& s = stack();
  server::testing::HttpClient client(s.serve->port());
  int session = 0;
  json messages;
  std::string path;
  const auto fresh = [&] {
    path = "/v1/sessions/bench-" + std::to_string(session++) + "/v1/chat/completions";
    messages = json::array({{{"role", "system"}, {"content", "You are a bench agent."}},
                            {{"role", "user"}, {"content", std::string(kContext, 'x')}}});
  };
  fresh();
  std::vector<double> seconds, twins, pairs;
  server::testing::HttpClient direct(s.upstream->port());
  s.upstream->clear_log();
  int turns = 0;
  for (auto _ : state) {
    const std::string body = json{{"messages", messages}}.dump();
    const Clock::time_point start = Clock::now();
    const auto reply = client.call("POST", path, body);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (reply.status != 200) {
      state.SkipWithError(("gateway call failed: " + reply.body).c_str());
      break;
    }
    state.PauseTiming();
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
      const auto twin_reply = direct.call("POST", "/generate", twin);
      twins.push_back(std::chrono::duration<double>(Clock::now() - twin_start).count());
      pairs.push_back(seconds.back() - twins.back());
      if (twin_reply.status != 200) state.SkipWithError("direct twin call failed");
      s.upstream->clear_log();
    }
    messages.push_back(json::parse(reply.body)["choices"][0]["message"]);
    messages.push_back({{"role", "user"}, {"content", "output of the step: fine"}});
    if (++turns % 32 == 0) fresh();  // stay near 8k tokens
    state.ResumeTiming();
  }
  const double p50 = percentile(seconds, 0.5), p99 = percentile(seconds, 0.99);
  state.counters["p50_us"] = p50 * 1e6;
  state.counters["p99_us"] = p99 * 1e6;
  state.counters["added_p50_us"] = (p50 - direct_p50) * 1e6;
  state.counters["added_p99_us"] = (p99 - direct_p99) * 1e6;
  state.counters["same_p50_us"] = percentile(twins, 0.5) * 1e6;
  state.counters["pair_added_p50_us"] = percentile(pairs, 0.5) * 1e6;
  state.counters["pair_added_p99_us"] = percentile(pairs, 0.99) * 1e6;
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GatewayChatTurn)->UseRealTime()->MinTime(1.0);

}  // namespace
