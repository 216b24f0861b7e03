// Load test of `crl serve` beside a Python baseline in the same run (issue 6; DESIGN.md rule 12).
//
// Both servers run as child processes on loopback: build/crl serve (Boost.Beast, C++) and
// bench/baselines/python_env_server.py (a threaded standard-library http.server serving the memory chain
// written in Python, JSON bodies). Each load runs S concurrent sessions (one keep-alive connection and one
// client thread each) that step memory-chain episodes (text view: 96 execution turns + 3 compaction requests
// answered with summaries) to completion with the oracle's text actions, and checks every episode ends
// completed with reward 1 (failed = any HTTP error or any other ending).
//   BM_CrlServerSingleStep<Json|Protobuf>/S   one step per request
//   BM_CrlServerSingleStepJsonSynthetic/S     the synthetic suite (text view, C = 3072) instead of the chain
//   BM_CrlServerBatchStep/S                   4 client threads, each stepping its S/4 episodes in one batch
//   BM_PythonBaselineSingleStep/S             the baseline, one step per request
//   .../1                                     one session: the latency of a step without queueing
// Counters: steps_per_s, p50_us / p99_us (per request: a batch request for batch steps), failed episodes, and
// server_cpu_us_per_step (the server process's CPU time per step, from /proc: robust to a busy machine).
// Environment: CRL_BENCH_EPISODES (episodes per session, default 2), CRL_BENCH_SERVER_THREADS (default 2).
#include <benchmark/benchmark.h>

#include <functional>
#include <string>
#include <vector>

#include "bench/server_load.h"
#include "proto/server.pb.h"
#include "server/router.h"
#include "wire/wire_codec.h"

namespace {

using namespace crl::bench;
using nlohmann::json;

ChildProcess& crl_server() {
  static ChildProcess server(
      {CRL_BINARY_DIR "/crl", "serve", "--port", "0", "--threads",
       std::to_string(env_int("CRL_BENCH_SERVER_THREADS", 2)), "--max-sessions", "1024"},
      true);
  return server;
}

ChildProcess& python_server() {
  static ChildProcess server({"/usr/bin/python3", CRL_SOURCE_DIR "/bench/baselines/python_env_server.py"},
                             true);
  return server;
}

// The same episode in binary protobuf.
bool play_crl_protobuf(HttpClient& client, const std::string& task, int seed, std::vector<double>& latencies,
                       int64_t& steps) {
  crl::proto::CreateEpisodeRequest create;
  create.set_env("memory_chain");
  create.set_task_id(task);
  create.set_seed(static_cast<uint64_t>(seed));
  create.mutable_budget()->set_capacity(2560);
  create.mutable_budget()->set_reserve(768);
  const std::string pb = "application/x-protobuf";
  Reply reply = client.call("POST", "/v1/episodes", create.SerializeAsString(), pb);
  crl::proto::StepResponse r;
  if (reply.status != 200 || !r.ParseFromString(reply.body)) return false;
  const std::string path = "/v1/episodes/" + r.episode_id() + "/step";
  const char fact = fact_in(r.prompt_text());
  crl::proto::StepRequest step;
  while (r.kind() != "done") {
    step.set_turn_id(r.next_turn_id());
    const bool summary = r.kind() == "compaction_request";
    step.mutable_action()->set_kind(summary ? "summary" : "assistant");
    step.mutable_action()->set_text(summary ? std::string("FACT ") + fact
                                    : r.append_text().find("QUESTION") != std::string::npos
                                        ? std::string("answer ") + fact
                                        : "continue");
    reply = timed(latencies, [&] { return client.call("POST", path, step.SerializeAsString(), pb); });
    if (reply.status != 200 || !r.ParseFromString(reply.body)) return false;
    ++steps;
  }
  const bool ok = r.status() == "completed" && r.reward() == 1.0;
  return client.call("DELETE", "/v1/episodes/" + r.episode_id()).status == 200 && ok;
}

// A synthetic-suite episode (text view; byte tokens, so C = 3072, T_comp = 1024: about 2 compactions) against
// crl serve in JSON: `next` until END, then a submission; a summary whenever one is asked. The submission is
// not the answer (the client does not solve the task), so success means the episode ended completed with no
// error.
bool play_crl_synthetic_json(HttpClient& client, const std::string& task, int seed,
                             std::vector<double>& latencies, int64_t& steps) {
  const int index = static_cast<int>(std::hash<std::string>{}(task) % 60);
  Reply reply =
      client.call("POST", "/v1/episodes",
                  R"({"env":"synthetic","split":"dev","index":)" + std::to_string(index) + R"(,"seed":)" +
                      std::to_string(seed) + R"(,"budget":{"capacity":3072,"reserve":1024}})");
  if (reply.status != 200) return false;
  json r = json::parse(reply.body);
  const std::string id = r["episode_id"];
  const std::string path = "/v1/episodes/" + id + "/step";
  bool end_seen = false;
  while (r["kind"] != "done") {
    const bool summary = r["kind"] == "compaction_request";
    const std::string action = summary
                                   ? R"({"kind":"summary","text":"Read records with next; nothing kept."})"
                               : end_seen ? R"({"kind":"assistant","text":"submit 0000"})"
                                          : R"({"kind":"assistant","text":"next"})";
    const std::string body =
        R"({"turn_id":)" + std::to_string(r["next_turn_id"].get<int>()) + R"(,"action":)" + action + "}";
    reply = timed(latencies, [&] { return client.call("POST", path, body); });
    if (reply.status != 200) return false;
    r = json::parse(reply.body);
    end_seen = end_seen || r["append_text"].get<std::string>().find("user\nEND") != std::string::npos;
    ++steps;
  }
  const bool ok = r["status"] == "completed";
  return client.call("DELETE", "/v1/episodes/" + id).status == 200 && ok;
}

// The same episode against the Python baseline.
bool play_python(HttpClient& client, const std::string& task, int seed, std::vector<double>& latencies,
                 int64_t& steps) {
  Reply reply = client.call("POST", "/episodes",
                            R"({"seed":)" + std::to_string(seed) + R"(,"task_id":")" + task + "\"}");
  if (reply.status != 200) return false;
  json r = json::parse(reply.body);
  const std::string id = r["episode_id"];
  const char fact = fact_in(r["prompt"]);
  const std::string path = "/episodes/" + id + "/step";
  while (r["kind"] != "done") {
    std::string kind = r["kind"] == "compaction_request" ? "summary" : "assistant";
    std::string text = "continue";
    if (kind == "summary") {
      text = std::string("FACT ") + fact;
    } else if (r.contains("append") && r["append"].get<std::string>().find("QUESTION") != std::string::npos) {
      text = std::string("answer ") + fact;
    }
    const std::string body = R"({"turn_id":)" + std::to_string(r["next_turn_id"].get<int>()) +
                             R"(,"kind":")" + kind + R"(","text":")" + text + R"("})";
    reply = timed(latencies, [&] { return client.call("POST", path, body); });
    if (reply.status != 200) return false;
    r = json::parse(reply.body);
    ++steps;
  }
  const bool ok = r["reward"].get<double>() == 1.0;
  return client.call("DELETE", "/episodes/" + id).status == 200 && ok;
}

// S episodes stepped by 4 client threads in batches: each round, one POST /v1/batch/step per thread holding
// one step of each of its live episodes.
double run_batched(uint16_t port, int sessions, int episodes, Load& load) {
  const int client_threads = std::min(4, sessions);
  return run_clients(
      port, client_threads, load,
      [&](HttpClient& client, int t, std::vector<double>& latencies, int64_t& steps) {
        for (int round = 0; round < episodes; ++round) {
          struct Live {
            std::string id;
            char fact;
            json last;
          };
          std::vector<Live> live;
          for (int s = t; s < sessions; s += client_threads) {
            const Reply reply =
                client.call("POST", "/v1/episodes",
                            chain_create("b" + std::to_string(s) + "-" + std::to_string(round), 7 + s));
            if (reply.status != 200) {
              load.failed++;
              continue;
            }
            json r = json::parse(reply.body);
            live.push_back({r["episode_id"], fact_in(r["prompt_text"]), r});
          }
          while (!live.empty()) {
            std::string body = R"({"steps":[)";
            for (size_t i = 0; i < live.size(); ++i) {
              body += (i ? "," : "") + std::string(R"({"episode_id":")") + live[i].id + R"(","turn_id":)" +
                      std::to_string(live[i].last["next_turn_id"].get<int>()) + R"(,"action":)" +
                      crl_action(live[i].last, live[i].fact) + "}";
            }
            body += "]}";
            const Reply reply = timed(latencies, [&] { return client.call("POST", "/v1/batch/step", body); });
            const json results = json::parse(reply.body)["results"];
            std::vector<Live> next;
            for (size_t i = 0; i < live.size(); ++i) {
              if (results[i]["http_status"] != 200) {
                load.failed++;
                continue;
              }
              ++steps;
              live[i].last = results[i]["response"];
              if (live[i].last["kind"] != "done") {
                next.push_back(std::move(live[i]));
              } else {
                bool ok =
                    live[i].last["status"] == "completed" && live[i].last["reward"].get<double>() == 1.0;
                ok = ok && client.call("DELETE", "/v1/episodes/" + live[i].id).status == 200;
                (ok ? load.completed : load.failed)++;
              }
            }
            live = std::move(next);
          }
        }
      });
}

// The same batched load in binary protobuf (what a high-throughput trainer client sends): one
// BatchStepRequest per round and thread, parsed with the generated classes.
double run_batched_protobuf(uint16_t port, int sessions, int episodes, Load& load) {
  const int client_threads = std::min(4, sessions);
  const std::string pb = "application/x-protobuf";
  return run_clients(
      port, client_threads, load,
      [&](HttpClient& client, int t, std::vector<double>& latencies, int64_t& steps) {
        for (int round = 0; round < episodes; ++round) {
          struct Live {
            char fact;
            crl::proto::StepResponse last;
          };
          std::vector<Live> live;
          for (int s = t; s < sessions; s += client_threads) {
            crl::proto::CreateEpisodeRequest create;
            create.set_env("memory_chain");
            create.set_task_id("p" + std::to_string(s) + "-" + std::to_string(round));
            create.set_seed(static_cast<uint64_t>(7 + s));
            create.mutable_budget()->set_capacity(2560);
            create.mutable_budget()->set_reserve(768);
            const Reply reply = client.call("POST", "/v1/episodes", create.SerializeAsString(), pb);
            Live l;
            if (reply.status != 200 || !l.last.ParseFromString(reply.body)) {
              load.failed++;
              continue;
            }
            l.fact = fact_in(l.last.prompt_text());
            live.push_back(std::move(l));
          }
          crl::proto::BatchStepRequest batch;
          crl::proto::BatchStepResponse results;
          while (!live.empty()) {
            batch.clear_steps();
            for (const Live& l : live) {
              crl::proto::StepRequest* step = batch.add_steps();
              step->set_episode_id(l.last.episode_id());
              step->set_turn_id(l.last.next_turn_id());
              const bool summary = l.last.kind() == "compaction_request";
              step->mutable_action()->set_kind(summary ? "summary" : "assistant");
              step->mutable_action()->set_text(summary ? std::string("FACT ") + l.fact
                                               : l.last.append_text().find("QUESTION") != std::string::npos
                                                   ? std::string("answer ") + l.fact
                                                   : "continue");
            }
            const Reply reply = timed(latencies, [&] {
              return client.call("POST", "/v1/batch/step", batch.SerializeAsString(), pb);
            });
            if (reply.status != 200 || !results.ParseFromString(reply.body) ||
                results.results_size() != static_cast<int>(live.size())) {
              throw std::runtime_error("batch step failed: HTTP " + std::to_string(reply.status));
            }
            std::vector<Live> next;
            for (size_t i = 0; i < live.size(); ++i) {
              const crl::proto::BatchStepResult& result = results.results(static_cast<int>(i));
              if (result.http_status() != 200) {
                load.failed++;
                continue;
              }
              ++steps;
              live[i].last = result.response();
              if (live[i].last.kind() != "done") {
                next.push_back(std::move(live[i]));
              } else {
                bool ok = live[i].last.status() == "completed" && live[i].last.reward() == 1.0;
                ok = ok && client.call("DELETE", "/v1/episodes/" + live[i].last.episode_id()).status == 200;
                (ok ? load.completed : load.failed)++;
              }
            }
            live = std::move(next);
          }
        }
      });
}

void single_step(benchmark::State& state, ChildProcess& server, PlayFn play) {
  const int sessions = static_cast<int>(state.range(0));
  const int episodes = env_int("CRL_BENCH_EPISODES", 2);
  {
    Load warmup;
    run_sessions(server.port(), std::min(sessions, 4), 1, play, warmup);
  }
  for (auto _ : state) {
    Load load;
    const double cpu = server.cpu_seconds();
    const double seconds = run_sessions(server.port(), sessions, episodes, play, load);
    report(state, load, seconds, sessions * episodes, server.cpu_seconds() - cpu);
  }
}

void BM_CrlServerSingleStepJson(benchmark::State& state) {
  single_step(state, crl_server(), play_crl_json);
}
void BM_CrlServerSingleStepProtobuf(benchmark::State& state) {
  single_step(state, crl_server(), play_crl_protobuf);
}
void BM_CrlServerSingleStepJsonSynthetic(benchmark::State& state) {
  single_step(state, crl_server(), play_crl_synthetic_json);
}
void BM_PythonBaselineSingleStep(benchmark::State& state) {
  single_step(state, python_server(), play_python);
}

using BatchLoadFn = double (*)(uint16_t port, int sessions, int episodes, Load& load);

void batch_step(benchmark::State& state, BatchLoadFn run) {
  const int sessions = static_cast<int>(state.range(0));
  const int episodes = env_int("CRL_BENCH_EPISODES", 2);
  {
    Load warmup;
    run(crl_server().port(), 4, 1, warmup);
  }
  for (auto _ : state) {
    Load load;
    const double cpu = crl_server().cpu_seconds();
    const double seconds = run(crl_server().port(), sessions, episodes, load);
    report(state, load, seconds, sessions * episodes, crl_server().cpu_seconds() - cpu);
  }
}
void BM_CrlServerBatchStep(benchmark::State& state) {
  batch_step(state, run_batched);
}
void BM_CrlServerBatchStepProtobuf(benchmark::State& state) {
  batch_step(state, run_batched_protobuf);
}

// The server's CPU cost per step without sockets: route() on an in-process service (decode, step, encode).
void route_steps(benchmark::State& state, crl::wire::WireFormat format) {
  using namespace crl::server;
  using namespace crl::wire;
  EpisodeService service({});
  const std::string type(content_type(format));
  auto call = [&](std::string_view method, const std::string& target, const std::string& body) {
    return route(service, HttpCall{method, target, type, type, body, false});
  };
  auto encode = [&](const google::protobuf::Message& m) { return encode_message(m, format); };
  auto decode = [&](const HttpAnswer& a, google::protobuf::Message& m) { decode_message(a.body, format, m); };
  crl::proto::CreateEpisodeRequest create;
  create.set_env("memory_chain");
  create.set_task_id("route");
  create.mutable_budget()->set_capacity(2560);
  create.mutable_budget()->set_reserve(768);
  crl::proto::StepResponse r;
  crl::proto::StepRequest step;
  int64_t steps = 0;
  for (auto _ : state) {
    if (r.kind().empty() || r.kind() == "done") {
      state.PauseTiming();
      if (!r.episode_id().empty()) call("DELETE", "/v1/episodes/" + r.episode_id(), "");
      decode(call("POST", "/v1/episodes", encode(create)), r);
      state.ResumeTiming();
    }
    step.set_turn_id(r.next_turn_id());
    const bool summary = r.kind() == "compaction_request";
    step.mutable_action()->set_kind(summary ? "summary" : "assistant");
    step.mutable_action()->set_text(summary ? "FACT 1" : "continue");
    const HttpAnswer answer = call("POST", "/v1/episodes/" + r.episode_id() + "/step", encode(step));
    decode(answer, r);
    ++steps;
  }
  state.SetItemsProcessed(steps);
}
void BM_RouteStepJson(benchmark::State& state) {
  route_steps(state, crl::wire::WireFormat::kJson);
}
void BM_RouteStepProtobuf(benchmark::State& state) {
  route_steps(state, crl::wire::WireFormat::kProtobuf);
}
BENCHMARK(BM_RouteStepJson)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RouteStepProtobuf)->Unit(benchmark::kMicrosecond);

// The Python baseline first, so that the C++ server's numbers are not taken while a cold interpreter starts.
BENCHMARK(BM_PythonBaselineSingleStep)
    ->Arg(64)
    ->Arg(1)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrlServerSingleStepJson)
    ->Arg(64)
    ->Arg(1)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrlServerSingleStepProtobuf)
    ->Arg(64)
    ->Arg(1)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrlServerSingleStepJsonSynthetic)
    ->Arg(64)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrlServerBatchStep)->Arg(64)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrlServerBatchStepProtobuf)
    ->Arg(64)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
