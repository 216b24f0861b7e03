// `crl lm serve` over HTTP on loopback (cli/lm_command.cpp, policies/lm/serve.h): how soon a client reads
// the first bytes of an answer, streamed (`stream: true`: each sampling round's events leave as a chunk
// before the next token is sampled) against the same request not streamed (the baseline: the whole answer at
// once), in the same run. The default model size (LmConfig: ~1M parameters, random weights), the byte
// tokenizer, a 16-byte prompt, 64 new tokens at temperature 1 with a fixed seed (the same tokens in both
// rows).
//   BM_LmServeFirstByte/0  not streamed: first_byte_us = the whole answer's time
//   BM_LmServeFirstByte/1  streamed: first_byte_us = until the first event's first byte; total_us = the
//   body's
//                          end (the last chunk)
// Counters are medians over the iterations (microseconds of wall time, the client's view).
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bench/first_byte_client.h"
#include "cli/lm_command.h"
#include "engine/tokenizer.h"
#include "policies/lm/serve.h"
#include "server/episode_service.h"
#include "server/http_server.h"

namespace crl {
namespace {

struct ServedModel {
  ServedModel()
      : service(model(), make_tokenizer("byte"), "bench"),
        episodes(server::ServiceOptions{}),
        http(options(service), episodes) {
    thread = std::thread([this] { http.run(); });
  }
  ~ServedModel() {
    http.request_stop();
    thread.join();
  }
  static lm::LmModel model() {
    lm::LmModel m;
    m.initialize(1);
    return m;
  }
  static server::HttpOptions options(const lm::LmService& service) {
    server::HttpOptions o;
    o.port = 0;
    o.handle_signals = false;
    cli::serve_lm_routes(service, o);
    return o;
  }
  lm::LmService service;
  server::EpisodeService episodes;
  server::HttpServer http;
  std::thread thread;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void BM_LmServeFirstByte(benchmark::State& state) {
  static ServedModel served;
  const bool stream = state.range(0) != 0;
  const std::string body = std::string(R"({"prompt": "Task: early_fact. ", "max_tokens": 64, "seed": 5)") +
                           (stream ? R"(, "stream": true})" : "}");
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(served.http.port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    state.SkipWithError("cannot connect to the served model");
    return;
  }
  // The end of the answer: the last chunk, or the JSON body's end (Content-Length is not parsed here: the
  // non-streamed body ends with its closing brace, which the server writes last).
  const std::string end = stream ? "\r\n0\r\n\r\n" : "}}";
  std::vector<double> first, total;
  for (auto _ : state) {
    const bench::TimedExchange exchange = bench::timed_exchange(fd, request, end);
    if (!exchange.ok) {
      state.SkipWithError(exchange.error.c_str());
      break;
    }
    first.push_back(exchange.first_byte_us);
    total.push_back(exchange.total_us);
  }
  ::close(fd);
  state.counters["first_byte_us"] = median(first);
  state.counters["total_us"] = median(total);
  state.SetLabel(stream ? "streamed" : "whole answer (baseline)");
}
BENCHMARK(BM_LmServeFirstByte)->Arg(0)->Arg(1)->UseRealTime()->MinTime(2.0);

}  // namespace
}  // namespace crl
