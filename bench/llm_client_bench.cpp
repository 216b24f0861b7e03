// The LLM policy's client (issue 7): its overhead per request and its throughput against the scripted LLM
// server (tests/policies/llm) on loopback, in the same process on its own thread.
//
//   BM_LlmRolloutInFlight/K          synthetic episodes (dev, text view, C = 3072: 1-2 compactions each)
//                                    driven by LlmDriver over SGLang's /generate with K requests in flight
//                                    (K = 1, 16, 64); the server answers at once
//   BM_LlmRolloutInFlightDelay5ms/K  the same with a server that takes 5 ms per answer (a stand-in for
//                                    generation time): what the in-flight limit buys
//   BM_LocalScriptedBaseline         the same episodes played by the same scripted model called in-process
//                                    (no HTTP, no JSON): the engine's own cost per request
// Counters: requests_per_s; client_us_per_request (engine time per request outside the HTTP exchange:
// request encoding, answer parsing, episode step, env step; CallRecord::client_seconds);
// client_cpu_us_per_request (CPU time of the driver's thread per request, the HTTP client and its system
// calls included, the server excluded: it runs on its own thread); for the baseline, us_per_request is the
// whole in-process cost (model included). Items = requests.
// Environment: CRL_BENCH_LLM_EPISODES (episodes per iteration, default 64).
#include <benchmark/benchmark.h>
#include <time.h>

#include <chrono>
#include <cstdlib>

#include "engine/tokenizer.h"
#include "envs/registry.h"
#include "policies/llm/llm_driver.h"
#include "tests/policies/llm/scripted_llm_server.h"

namespace {

using namespace crl;

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

size_t episodes_per_iteration() {
  const char* v = std::getenv("CRL_BENCH_LLM_EPISODES");
  return v ? static_cast<size_t>(std::max(1, std::atoi(v))) : 64;
}

Budget text_budget() {
  Budget b;
  b.capacity = 3072;
  b.reserve = 768;
  b.summary_cap = 512;
  return b;
}

std::vector<std::unique_ptr<Episode>> make_episodes(size_t count, const std::shared_ptr<const Codec>& codec) {
  std::vector<std::unique_ptr<Episode>> out;
  for (size_t i = 0; i < count; ++i) {
    EpisodeConfig config;
    config.budget = text_budget();
    config.seed = 7;
    config.sample_index = 0;
    out.push_back(std::make_unique<Episode>(make_env("synthetic", {{"split", "dev"}}), codec, config));
    out.back()->start(Task{"dev-" + std::to_string(i % 60), i % 60, "dev"});
  }
  return out;
}

void run_driver(benchmark::State& state, double delay_s) {
  testing::ScriptedLlmOptions server_options;
  server_options.log_calls = false;
  server_options.faults.delay_s = delay_s;
  testing::ScriptedLlmServer server(server_options);
  const ByteTokenizer tokenizer;
  llm::LlmOptions options;
  options.base_url = server.url();
  options.max_in_flight = static_cast<size_t>(state.range(0));
  options.vocab_size = tokenizer.vocab_size();
  options.sampling.stop_token_ids = {*tokenizer.special_token("<|im_end|>")};
  const auto codec = make_text_codec(std::make_shared<ByteTokenizer>());
  const size_t count = episodes_per_iteration();
  uint64_t requests = 0, failed = 0;
  double client_seconds = 0, wall = 0, cpu = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto episodes = make_episodes(count, codec);
    std::vector<Episode*> pointers;
    for (auto& e : episodes) pointers.push_back(e.get());
    llm::LlmDriver driver(options);
    state.ResumeTiming();
    const double cpu_start = thread_cpu_seconds();
    const llm::DriveStats stats = driver.run(pointers);
    cpu += thread_cpu_seconds() - cpu_start;
    state.PauseTiming();
    for (const llm::CallRecord& c : stats.calls) {
      client_seconds += c.client_seconds;
      failed += c.ok ? 0 : 1;
    }
    requests += stats.calls.size();
    wall += stats.seconds;
    for (auto& e : episodes) {
      if (e->status() != EpisodeStatus::kCompleted) ++failed;
    }
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(requests));
  state.counters["requests_per_s"] = static_cast<double>(requests) / wall;
  state.counters["client_us_per_request"] = 1e6 * client_seconds / static_cast<double>(requests);
  state.counters["client_cpu_us_per_request"] = 1e6 * cpu / static_cast<double>(requests);
  state.counters["failed"] = static_cast<double>(failed);
}

void BM_LlmRolloutInFlight(benchmark::State& state) {
  run_driver(state, 0.0);
}
BENCHMARK(BM_LlmRolloutInFlight)->Arg(1)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LlmRolloutInFlightDelay5ms(benchmark::State& state) {
  run_driver(state, 0.005);
}
BENCHMARK(BM_LlmRolloutInFlightDelay5ms)
    ->Arg(1)
    ->Arg(16)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_LocalScriptedBaseline(benchmark::State& state) {
  const auto tokenizer = std::make_shared<ByteTokenizer>();
  const auto codec = make_text_codec(tokenizer);
  const TokenId im_end = *tokenizer->special_token("<|im_end|>");
  const size_t count = episodes_per_iteration();
  uint64_t requests = 0;
  double seconds = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto episodes = make_episodes(count, codec);
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    for (auto& e : episodes) {
      while (!e->done()) {
        const Request& r = e->request();
        const uint64_t seed = llm::sampling_seed(r.stream);
        Decision d;
        d.tokens = tokenizer->encode(
            testing::scripted_answer(tokenizer->decode(r.prompt.ids()), testing::SummaryMode::kKeep, seed));
        d.tokens.push_back(im_end);
        if (static_cast<int64_t>(d.tokens.size()) > r.max_new_tokens) d.tokens.resize(r.max_new_tokens);
        for (size_t i = 0; i < d.tokens.size(); ++i)
          d.logprobs.push_back(testing::scripted_logprob(seed, i, d.tokens[i]));
        e->submit(d);
        ++requests;
      }
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  state.SetItemsProcessed(static_cast<int64_t>(requests));
  state.counters["requests_per_s"] = static_cast<double>(requests) / seconds;
  state.counters["us_per_request"] = 1e6 * seconds / static_cast<double>(requests);
}
BENCHMARK(BM_LocalScriptedBaseline)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
