// `crl lm init --out FILE [sizes] [--tokenizer T]`: writes a freshly initialised language model checkpoint.
// `crl lm serve --checkpoint FILE --tokenizer T [--host H --port P]`: serves it over OpenAI /v1/completions
// and SGLang /generate (policies/lm/serve.h) with the engine's HTTP server (server/http_server.h: limits,
// deadlines, graceful drain on SIGTERM, GET /health and /metrics).
#include "cli/lm_command.h"

#include <csignal>
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "engine/error.h"
#include "engine/tokenizer.h"
#include "policies/lm/checkpoint.h"
#include "scenarios/checkpoint.h"

namespace crl::cli {

int run_lm_train(const std::vector<std::string>& args);  // cli/lm_train.cpp

std::unique_ptr<lm::LmService> load_lm_service(const std::string& checkpoint, const std::string& tokenizer,
                                               const std::string& name, lm::LmBackend backend) {
  lm::LmCheckpoint state = lm::load_lm_state(scenarios::read_checkpoint(checkpoint).policy(), checkpoint);
  auto tok = make_tokenizer(tokenizer);
  if (!state.tokenizer_fingerprint.empty() && state.tokenizer_fingerprint != tok->fingerprint()) {
    throw Error(tokenizer, "--tokenizer",
                "fingerprint " + tok->fingerprint() + " differs from " + state.tokenizer_fingerprint +
                    ", the tokenizer " + checkpoint + " was trained with");
  }
  return std::make_unique<lm::LmService>(std::move(state.model), std::move(tok), name, backend);
}

void serve_lm_routes(const lm::LmService& service, server::HttpOptions& http) {
  http.routes = [&service](const server::HttpCall& call) -> std::optional<server::HttpAnswer> {
    const std::string_view path = call.target.substr(0, call.target.find('?'));
    auto answer = service.handle(call.method, path, call.body);
    if (!answer) return std::nullopt;
    return server::HttpAnswer{answer->status, std::move(answer->content_type), std::move(answer->body), 0,
                              std::move(answer->stream)};
  };
}

namespace {

int run_init(const std::vector<std::string>& args) {
  po::options_description options;
  std::string out, tokenizer;
  lm::LmConfig c;
  uint64_t seed = 0;
  options.add_options()("out", po::value(&out), "the checkpoint to write")(
      "vocab", po::value(&c.vocab)->default_value(c.vocab), "vocabulary size")(
      "d-model", po::value(&c.d_model)->default_value(c.d_model), "model width")(
      "heads", po::value(&c.heads)->default_value(c.heads), "attention heads")(
      "layers", po::value(&c.layers)->default_value(c.layers), "blocks")(
      "d-ff", po::value(&c.d_ff)->default_value(c.d_ff), "MLP width")(
      "max-positions", po::value(&c.max_positions)->default_value(c.max_positions), "context length")(
      "seed", po::value(&seed)->default_value(0), "initialisation seed")(
      "tokenizer", po::value(&tokenizer), "record this tokenizer's fingerprint (and check its size)");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("lm init", "--out FILE [--vocab N ...] [--tokenizer T]", options, positional, args, vm,
                     exit_code)) {
    return exit_code;
  }
  if (out.empty()) throw Error("--out", "out", "missing: the checkpoint to write");
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw Error("crl lm init", "", e.what());
  }
  lm::LmModel model(c);
  model.initialize(seed);
  std::string fingerprint;
  if (!tokenizer.empty()) {
    const auto tok = make_tokenizer(tokenizer);
    if (tok->vocab_size() > c.vocab) {
      throw Error(tokenizer, "--vocab",
                  "the tokenizer has " + std::to_string(tok->vocab_size()) + " tokens, more than --vocab " +
                      std::to_string(c.vocab));
    }
    fingerprint = tok->fingerprint();
  }
  proto::checkpoint::Checkpoint ckpt;
  ckpt.set_seed(seed);
  lm::save_lm_state(model, lm::LmOptimizer(model.layout()), fingerprint, *ckpt.mutable_policy());
  scenarios::write_checkpoint(out, ckpt);
  std::cout << "wrote " << out << ": " << lm::lm_shape(c) << " (" << model.size() << " parameters)\n";
  return 0;
}

int run_serve(const std::vector<std::string>& args) {
  po::options_description options;
  std::string checkpoint, tokenizer, name, backend;
  server::HttpOptions http;
  http.port = 8000;
  options.add_options()("checkpoint", po::value(&checkpoint),
                        "an lm checkpoint (crl lm init, a scenario run)")(
      "tokenizer", po::value(&tokenizer)->default_value("byte"),
      "byte | PATH/tokenizer.json | PATH.tiktoken")("name", po::value(&name)->default_value("crl-lm"),
                                                    "the model name the APIs report")(
      "host", po::value(&http.host)->default_value(http.host), "address to listen on")(
      "port", po::value(&http.port)->default_value(http.port), "port (0: any free port, printed)")(
      "threads", po::value(&http.threads)->default_value(http.threads), "I/O threads")(
      "workers", po::value(&http.workers)->default_value(4), "requests sampled at once")(
      "backend", po::value(&backend)->default_value("cpu"),
      "cpu | cuda: where the network runs while sampling (the token choice is the same code)");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("lm serve", "--checkpoint FILE [--tokenizer T] [--host H] [--port P]", options,
                     positional, args, vm, exit_code)) {
    return exit_code;
  }
  if (checkpoint.empty()) throw Error("--checkpoint", "checkpoint", "missing: the model to serve");
  if (http.workers < 1 || http.threads < 1) throw Error("--workers/--threads", "", "must be >= 1");
  http.max_workers = http.workers;  // sampling is CPU work: requests beyond --workers wait their turn
  const auto service =
      load_lm_service(checkpoint, tokenizer, name, lm::parse_backend(backend, "--backend", "backend"));
  serve_lm_routes(*service, http);
  server::EpisodeService health({});  // answers /health and /metrics; every other route is the model's
  std::signal(SIGPIPE, SIG_IGN);
  server::HttpServer server(http, health);
  std::cout << "listening on " << http.host << ":" << server.port() << " ("
            << lm::lm_shape(service->model().config()) << ")" << std::endl;
  server.run();
  return 0;
}

int run_lm(const std::vector<std::string>& args) {
  const std::string usage =
      "usage: crl lm init --out FILE [...] | crl lm train --tokenizer T --out FILE [...] | crl lm serve "
      "--checkpoint FILE [...]";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << usage << "\n";
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "init") return run_init(rest);
  if (args[0] == "serve") return run_serve(rest);
  if (args[0] == "train") return run_lm_train(rest);
  std::cerr << "crl lm: unknown subcommand " << quote(args[0]) << "\n" << usage << "\n";
  return 2;
}

const CommandRegistrar kLm(Command{
    "lm", "the small language model: init a checkpoint, serve it over OpenAI/SGLang APIs", run_lm});

}  // namespace
}  // namespace crl::cli
