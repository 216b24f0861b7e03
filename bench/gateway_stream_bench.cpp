// A streamed gateway call sent as the upstream samples it (server/gateway/live_answer.h) against the same
// call answered whole, same run, one harness on loopback, the stand-in upstream speaking SGLang /generate.
//
//   BM_GatewayStreamFirstByte/0  `stream: false`: the whole answer at once (the baseline)
//   BM_GatewayStreamFirstByte/1  `stream: true`: the gateway streams the upstream call and sends what is
//                                certain at once (the first body bytes: the role chunk and the first text)
// The stand-in samples a 64-byte answer (65 tokens with the end of turn, byte tokenizer) at 2 ms a token
// (500 tokens/s, a fast server's decode for one sequence): a stream's events go out 2 ms apart, a whole
// answer after all 65 (about 130 ms either way). Counters: medians over the iterations of the harness's wall
// time until the first body byte and until the body's end, in microseconds.
//
//   BM_GatewayStreamCpu/0  not streamed: the server threads' CPU per call (8k-token context, a 256-byte
//                          answer, no delay)
//   BM_GatewayStreamCpu/1  streamed, SGLang's default stream (every event the answer so far: O(n^2) bytes)
//   BM_GatewayStreamCpu/2  streamed, SGLang's --incremental-streaming-output (every event its new token)
// The CPU the gateway's threads (crl-io, crl-worker) spend per call: reading the upstream's events,
// decoding, the live reply, the chunks.
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/first_byte_client.h"
#include "bench/gateway_bench_support.h"
#include "engine/heap.h"
#include "server/gateway/gateway.h"
#include "tests/policies/llm/scripted_llm_server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace crl {
namespace {

using gateway_bench::json;

struct StreamStack {
  StreamStack(const std::string& answer, double event_delay_s, bool incremental) {
    keep_freed_memory();
    testing::ScriptedLlmOptions llm;
    llm.log_calls = false;
    llm.script = [answer](std::string_view, uint64_t) { return answer; };
    llm.stream_event_delay_s = event_delay_s;
    llm.incremental_stream = incremental;
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

double median(std::vector<double> v) {
  return gateway_bench::percentile(std::move(v), 0.5);
}

void BM_GatewayStreamFirstByte(benchmark::State& state) {
  static StreamStack s(std::string(64, 'a'), 0.002, false);
  const bool stream = state.range(0) != 0;
  static int session = 0;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(s.serve->port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    state.SkipWithError("cannot connect to the gateway");
    return;
  }
  // The end of the answer: the last chunk (a stream), or the JSON body's end (its closing brace is the
  // server's last byte).
  const std::string end = stream ? "\r\n0\r\n\r\n" : "}}";
  server::testing::HttpClient trainer(s.serve->port());  // ends each session (not timed)
  std::vector<double> first, total;
  for (auto _ : state) {
    // A fresh session per call: every call is a session's first (no retry, no history to match).
    const std::string body =
        json{{"stream", stream}, {"messages", json::array({{{"role", "user"}, {"content", "go"}}})}}.dump();
    const std::string id = "first-byte-" + std::to_string(session++);
    const std::string request =
        "POST /v1/sessions/" + id +
        "/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    const bench::TimedExchange exchange = bench::timed_exchange(fd, request, end);
    if (!exchange.ok || exchange.received.find("HTTP/1.1 200") != 0) {
      state.SkipWithError((exchange.error + exchange.received.substr(0, 300)).c_str());
      break;
    }
    first.push_back(exchange.first_byte_us);
    total.push_back(exchange.total_us);
    state.PauseTiming();
    trainer.call("DELETE", "/v1/sessions/" + id, "");
    state.ResumeTiming();
  }
  ::close(fd);
  state.counters["first_byte_us"] = median(first);
  state.counters["total_us"] = median(total);
  state.SetLabel(stream ? "streamed as sampled" : "whole answer (baseline)");
}
BENCHMARK(BM_GatewayStreamFirstByte)->Arg(0)->Arg(1)->UseRealTime()->MinTime(2.0);

void BM_GatewayStreamCpu(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  static StreamStack cumulative(std::string(256, 'b'), 0, false), incremental(std::string(256, 'b'), 0, true);
  StreamStack& s = mode == 2 ? incremental : cumulative;
  server::testing::HttpClient client(s.serve->port());
  static int session = 0;
  const auto call = [&] {
    const std::string id = "cpu-" + std::to_string(session++);
    const std::string body =
        json{{"stream", mode != 0},
             {"messages",
              json::array({{{"role", "user"}, {"content", std::string(gateway_bench::kContext, 'x')}}})}}
            .dump();
    const auto reply = client.call("POST", "/v1/sessions/" + id + "/v1/chat/completions", body);
    client.call("DELETE", "/v1/sessions/" + id, "");  // (the trainer ends it; no reward: nothing to export)
    return reply.status == 200;
  };
  for (int i = 0; i < 16; ++i) call();  // warm-up
  const double server_start = gateway_bench::named_threads_cpu_seconds("crl-");
  int64_t calls = 0;
  for (auto _ : state) {
    if (!call()) {
      state.SkipWithError("the call failed");
      break;
    }
    ++calls;
  }
  const double server_cpu = gateway_bench::named_threads_cpu_seconds("crl-") - server_start;
  // (The DELETE's CPU is in it too, the same in every row.)
  state.counters["server_cpu_us"] = server_cpu / static_cast<double>(std::max<int64_t>(1, calls)) * 1e6;
  state.SetLabel(mode == 0   ? "whole answer (baseline)"
                 : mode == 1 ? "streamed, SGLang's default events"
                             : "streamed, incremental events");
}
BENCHMARK(BM_GatewayStreamCpu)->Arg(0)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);

}  // namespace
}  // namespace crl
