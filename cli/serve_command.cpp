// `crl serve`: serves every registered environment to external trainers over HTTP (PROTOCOL.md section 2,
// step mode). The first line on stdout is `listening on HOST:PORT` (with --port 0 the port is ephemeral, so
// scripts and tests read it there). SIGTERM or SIGINT drains the requests in flight and exits 0; at the
// --drain-timeout deadline, requests still running are answered 503 drain_deadline and the process exits 0
// at once, without waiting for the environment code still blocked in them (server/http_server.h).
// --snapshot-dir DIR: sessions are snapshotted to DIR (every --snapshot-every steps, and all of them once the
// drain is over, before the process exits) and restored from there by any backend sharing DIR
// (server/snapshot_store.h, server/session_restore.cpp).
// --ui turns on the viewer's lists of live episodes and recent exports (server/ui_routes.h says why
// they are opt-in).
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "engine/chat_template.h"
#include "engine/error.h"
#include "engine/heap.h"
#include "envs/registry.h"
#include "policies/llm/served_models.h"
#include "server/episode_service.h"
#include "server/gateway/gateway.h"
#include "server/http_server.h"

namespace crl::cli {
namespace {

int serve_command(const std::vector<std::string>& args) {
  server::HttpOptions http;
  server::ServiceOptions service;
  size_t max_sessions = service.max_sessions;
  uint32_t max_body = http.max_body_bytes;
  std::vector<std::string> env_params;
  po::options_description options;
  options.add_options()("host", po::value(&http.host)->default_value(http.host), "address to listen on")(
      "port", po::value(&http.port)->default_value(http.port),
      "port (0: an ephemeral port, printed on stdout)")(
      "threads", po::value(&http.threads)->default_value(http.threads),
      "I/O threads, an event loop each (accept, parse, write, gateway calls on fibers; never environment "
      "code)")(
      "workers", po::value(&http.workers)->default_value(http.workers),
      "worker threads kept for requests (steps, batches, rollouts, gateway calls: the environment code and "
      "the LLM waits); a blocked step or a rollout holds one for its whole run")(
      "max-workers", po::value(&http.max_workers)->default_value(http.max_workers),
      "the most worker threads (>= --workers): the pool grows while every thread is busy; 0: one per request "
      "in flight, so no request waits for a thread (requests beyond N wait in a queue)")(
      "max-connections", po::value(&http.max_connections)->default_value(http.max_connections),
      "open connections at most; one beyond gets 503 too_many_connections with Retry-After")(
      "max-sessions", po::value(&max_sessions)->default_value(max_sessions),
      "live episodes at most; beyond it POST /v1/episodes answers 429 with retry_after")(
      "idle-timeout", po::value(&service.idle_timeout_s)->default_value(service.idle_timeout_s),
      "seconds after which an untouched episode or gateway session is reaped")(
      "request-timeout", po::value(&http.request_timeout_s)->default_value(http.request_timeout_s),
      "seconds a client has to send a whole request (and to read the answer)")(
      "max-body-bytes", po::value(&max_body)->default_value(max_body), "largest request body (413 beyond)")(
      "max-batch", po::value(&service.max_batch)->default_value(service.max_batch),
      "most steps in one POST /v1/batch/step")(
      "drain-timeout", po::value(&http.drain_timeout_s)->default_value(http.drain_timeout_s),
      "seconds SIGTERM waits for requests in flight; then they get 503 drain_deadline and the process "
      "exits")(
      "tokenizer", po::value(&service.tokenizer)->default_value(service.tokenizer),
      "tokenizer of the text view: byte (built in), a Hugging Face tokenizer.json or a .tiktoken file; it "
      "must have the chat template's special tokens")(
      "chat-template", po::value(&service.chat_template)->default_value(service.chat_template),
      "how the text view renders prompts: chatml (needs <|im_start|>, <|im_end|>) | plain (needs "
      "<|endoftext|>; for tokenizers without ChatML tokens) | PATH.jinja | PATH/tokenizer_config.json (the "
      "model's own Jinja template)")("default-chat-template-kwargs",
                                     po::value(&service.chat_template_variables), kTemplateKwargsHelp)(
      "env-param", po::value(&env_params)->composing(),
      "ENV.KEY=VALUE (repeatable): an environment parameter for every episode of ENV, e.g. "
      "shell.tasks_dir=/srv/tasks; the only way to set server-only ones ('crl inspect --envs')")(
      "max-client-timeout",
      po::value(&service.max_client_timeout_s)->default_value(service.max_client_timeout_s),
      "seconds: the largest timeout a request may choose (llm.request_timeout_s, duration parameters); "
      "above it: 400 over_limit")(
      "max-llm-in-flight", po::value(&service.max_llm_in_flight)->default_value(service.max_llm_in_flight),
      "the largest llm.max_in_flight of POST /v1/rollouts")(
      "ui", po::bool_switch(&service.ui),
      "operator lists for the viewer at /ui: GET /v1/episodes (every live episode) and GET /v1/exports (the "
      "last --keep-exports finished ones); off by default, since they name every client's episodes")(
      "keep-exports", po::value(&service.keep_exports)->default_value(service.keep_exports),
      "with --ui: finished episodes whose export is kept for /ui after DELETE or the reaper (0: none)")(

      "snapshot-dir", po::value(&service.snapshot_dir),
      "DIR shared by the backends of a fleet: sessions are snapshotted there (every --snapshot-every steps "
      "and "
      "all at SIGTERM) and a request for an episode this server does not hold restores it from there "
      "(deploy/README.md)")(
      "snapshot-every", po::value(&service.snapshot_every)->default_value(service.snapshot_every),
      "with --snapshot-dir: snapshot a session after every N-th step (0: only when draining at SIGTERM)")(
      "backend-tag", po::value(&service.backend_tag),
      "[a-z0-9]{1,16}: put into every episode id (ep-TAG-<hex>) so that HAProxy routes a path naming an "
      "episode to this server ('crl deploy haproxy', deploy/README.md)")(
      "openenv-env", po::value(&http.openenv_env),
      "OpenEnv sessions (WebSocket GET /ws): the environment of a reset whose data names no 'env'");
  // The compaction gateway (server/gateway/gateway.h): on with --llm.
  server::gateway::GatewayOptions gw;
  gw.budget = Budget{32768, 8192, 2, 4096, 4096, 8};
  std::string llm_url, llm_api = "sglang";
  double wait_for_llm = 0;
  std::string stream_upstream = "on";
  options.add_options()(
      "llm", po::value(&llm_url),
      "http://HOST:PORT of an LLM server: turns on the compaction gateway for agent harnesses "
      "(/v1/sessions/{id}/v1/chat/completions, PROTOCOL.md section 5)")(
      "api", po::value(&llm_api)->default_value(llm_api),
      "the LLM server's API: sglang (/generate) | openai "
      "(/v1/completions with token ids)")(
      "llm-timeout", po::value(&gw.upstream.request_timeout_s)->default_value(gw.upstream.request_timeout_s),
      "seconds one upstream call may take, retries included (then 504 to the harness)")(
      "llm-retries", po::value(&gw.upstream.max_retries)->default_value(gw.upstream.max_retries),
      "retries of an upstream call on connection errors and 5xx")(
      "llm-model", po::value(&gw.sampling.model), "the `model` sent to an OpenAI-compatible upstream")(
      "wait-for-llm", po::value(&wait_for_llm)->default_value(wait_for_llm), kWaitForLlmHelp)(
      "stream-keepalive", po::value(&gw.stream_keepalive_s)->default_value(gw.stream_keepalive_s),
      "a streamed gateway call (stream: true) that has waited this many seconds (for the upstream, a "
      "retry's backoff, or its session's call in flight) sends its head and a comment line (': keep-alive') "
      "every period until its events, so that harnesses' read and idle timeouts do not cut long samples; "
      "an upstream failure after that is the API's error event instead of a 5xx; 0: off; at most 86400")(
      "stream-upstream", po::value(&stream_upstream)->default_value(stream_upstream),
      "on: a streamed gateway call (stream: true) streams its upstream call too and sends the answer as it "
      "is sampled (what is certain of it at once, the rest at its end) | off: the answer is sent whole once "
      "the upstream answered")(
      "tool-call-parser", po::value(&gw.tool_call_parser)->default_value(gw.tool_call_parser),
      "how the model writes tool calls, read back into the harness's tool_calls (vLLM's and SGLang's "
      "names): auto (as the chat template writes a call) | hermes (Qwen2.5/Qwen3, the built-in chatml) | "
      "llama3_json | deepseek_v3 | qwen3_coder | pythonic (Llama 3.2-4) | harmony (gpt-oss: answers stop on "
      "<|call|> and <|return|>)")(
      "reasoning-parser", po::value(&gw.reasoning_parser)->default_value(gw.reasoning_parser),
      "how a reasoning model's thinking is kept out of the harness's content (shown as reasoning_content): "
      "auto (think when the tokenizer has </think>) | none | think (Qwen3, QwQ, DeepSeek-R1: the text up to "
      "</think>)")("capacity", po::value(&gw.budget.capacity)->default_value(gw.budget.capacity),
                   "gateway sessions: C")(
      "reserve", po::value(&gw.budget.reserve)->default_value(gw.budget.reserve), "gateway sessions: T_comp")(
      "tail-k", po::value(&gw.budget.tail_k)->default_value(gw.budget.tail_k),
      "gateway sessions: newest atomic steps kept after a summary")(
      "per-turn-cap", po::value(&gw.budget.per_turn_cap)->default_value(gw.budget.per_turn_cap),
      "gateway sessions: most tokens of one answer")(
      "summary-cap", po::value(&gw.budget.summary_cap)->default_value(gw.budget.summary_cap),
      "gateway sessions: most tokens of one summary")(
      "max-compactions", po::value(&gw.budget.max_compactions)->default_value(gw.budget.max_compactions),
      "gateway sessions: compactions before a session is truncated")(
      "max-gateway-sessions", po::value(&gw.max_sessions)->default_value(gw.max_sessions),
      "live gateway sessions at most (429 beyond)");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("serve", "[options]", options, positional, args, vm, exit_code)) return exit_code;
  if (http.threads < 1 || http.threads > 256) {
    throw Error("option --threads", "", "value " + std::to_string(http.threads) + " must be in 1 .. 256");
  }
  if (http.workers < 1 || http.workers > 4096) {
    throw Error("option --workers", "", "value " + std::to_string(http.workers) + " must be in 1 .. 4096");
  }
  if (http.max_workers != 0 && (http.max_workers < http.workers || http.max_workers > 65536)) {
    throw Error("option --max-workers", "",
                "value " + std::to_string(http.max_workers) +
                    " must be 0 (one per request in flight) or in " + std::to_string(http.workers) +
                    " (--workers) .. 65536");
  }
  if (http.max_connections < 1) throw Error("option --max-connections", "", "value must be >= 1");
  if (!(http.drain_timeout_s >= 0)) throw Error("option --drain-timeout", "", "value must be >= 0");
  if (max_sessions < 1) throw Error("option --max-sessions", "", "value must be >= 1");
  if (!(service.idle_timeout_s > 0)) throw Error("option --idle-timeout", "", "value must be > 0");
  if (!(gw.stream_keepalive_s >= 0 && gw.stream_keepalive_s <= 86400))
    throw Error("option --stream-keepalive", "", "value must be between 0 and 86400 seconds");
  if (stream_upstream != "on" && stream_upstream != "off")
    throw Error("option --stream-upstream", "", "value " + quote(stream_upstream) + " is not one of on, off");
  gw.stream_upstream = stream_upstream == "on";
  gw.idle_timeout_s = service.idle_timeout_s;  // gateway sessions are reaped like episodes
  if (!(http.request_timeout_s > 0)) throw Error("option --request-timeout", "", "value must be > 0");
  if (max_body < 1024) throw Error("option --max-body-bytes", "", "value must be >= 1024");
  if (!(service.max_client_timeout_s > 0))
    throw Error("option --max-client-timeout", "", "value must be > 0");
  if (service.max_llm_in_flight < 1) throw Error("option --max-llm-in-flight", "", "value must be >= 1");
  if (service.keep_exports > 100000) throw Error("option --keep-exports", "", "value must be <= 100000");
  if (service.ui && http.host != "127.0.0.1" && http.host != "::1" && http.host != "localhost") {
    std::cerr << "crl serve: warning: --ui lists every episode id to anyone who reaches " << http.host
              << " (ids are the only credential of an episode)\n";
  }
  for (const std::string& item : env_params) {
    const size_t dot = item.find('.'), eq = item.find('=');
    if (dot == std::string::npos || dot == 0 || eq == std::string::npos || eq < dot + 2) {
      throw Error("option --env-param", "", "value " + quote(item) + " is not ENV.KEY=VALUE");
    }
    service.env_params[item.substr(0, dot)][item.substr(dot + 1, eq - dot - 1)] = item.substr(eq + 1);
  }
  if (!http.openenv_env.empty()) env_registry().entry(http.openenv_env, "option --openenv-env");
  if (vm.count("backend-tag") && service.backend_tag.empty())
    throw Error("option --backend-tag", "", "value must not be empty");
  server::check_backend_tag(service.backend_tag);
  if (vm.count("snapshot-dir") && service.snapshot_dir.empty())
    throw Error("option --snapshot-dir", "", "value must not be empty");
  if (!vm["snapshot-every"].defaulted() && service.snapshot_dir.empty())
    throw Error("option --snapshot-every", "", "needs --snapshot-dir");
  // A bad name, file or variables fail here, naming the option; the variables are kept as compact JSON.
  service.chat_template_variables = template_variables(
      load_turn_template(service.chat_template, "--chat-template", service.chat_template_variables));
  service.max_sessions = max_sessions;
  service.max_body_bytes = max_body;
  service.request_timeout_s = http.request_timeout_s;
  service.threads = static_cast<uint32_t>(http.threads);
  http.max_body_bytes = max_body;

  // Each connection is a file descriptor: raise the soft limit towards what --max-connections needs (plus
  // room for sessions' files and children), as far as the hard limit allows.
  if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    const rlim_t wanted = static_cast<rlim_t>(http.max_connections) + 256;
    if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
      limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
      setrlimit(RLIMIT_NOFILE, &limit);
    }
  }
  std::signal(SIGPIPE, SIG_IGN);  // a client that vanished is an error code, never a signal
  server::EpisodeService episodes(service);
  // Request and answer buffers of 100 KiB and more, built and freed per request: without this glibc gives
  // them back to the kernel each time; and each call's small blocks are merged as they are freed rather than
  // all at once by the next large request (engine/heap.h).
  keep_freed_memory();
  merge_small_blocks_on_free();
  std::unique_ptr<server::gateway::Gateway> gateway;
  if (!llm_url.empty()) {
    gw.upstream.base_url = llm_url;
    gw.upstream.api = llm::parse_api_kind(llm_api, "option --api");
    gw.tokenizer = service.tokenizer;
    gw.chat_template = service.chat_template;
    gw.template_variables = service.chat_template_variables;
    gateway = std::make_unique<server::gateway::Gateway>(gw, &episodes.metrics());  // checks the options
    // Then whether the server can hold the window (policies/llm/served_models.h).
    const llm::ServedModelFit fit =
        llm::check_served_model(llm::wait_for_served_models(llm_url, wait_for_llm, "--llm", "--wait-for-llm"),
                                {gw.upstream.api == llm::ApiKind::kOpenAi ? gw.sampling.model : "",
                                 "--llm-model", gw.budget.capacity, "--capacity"});
    std::cerr << "crl serve: " << fit.line << std::endl;
    gateway->set_upstream_context(fit.max_model_len);
    http.gateway = gateway.get();
  }
  server::HttpServer server(http, episodes);
  episodes.set_snapshot_address(http.host + ":" + std::to_string(server.port()));
  std::cout << "listening on " << http.host << ":" << server.port() << std::endl;
  server.run();
  if (!service.snapshot_dir.empty()) {
    // The drain's last act: every session's snapshot, before the process (and its liveness lock) goes, so
    // that the backend that next receives a request for one restores it with nothing lost.
    const size_t written = episodes.snapshot_all();
    std::cerr << "crl serve: wrote " << written << " snapshot(s) to " << service.snapshot_dir << std::endl;
  }
  if (const size_t unfinished = server.unfinished(); unfinished > 0) {
    // Blocked environment code cannot be waited for (that is what the deadline is for), nor can the service
    // be destroyed under it: leave now. Sandboxed children die with the process (PDEATHSIG).
    std::cerr << "crl serve: drain deadline passed with " << unfinished
              << " request(s) still running; exiting without them" << std::endl;
    std::cout.flush();
    std::_Exit(0);
  }
  std::cerr << "crl serve: drained, exiting" << std::endl;
  return 0;
}

const CommandRegistrar kServeCommandRegistrar(
    {"serve", "serve environments to external trainers over HTTP (step mode)", serve_command});

}  // namespace
}  // namespace crl::cli
