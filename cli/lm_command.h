#pragma once
// `crl lm init` (a fresh checkpoint) and `crl lm serve` (policies/lm/serve.h behind the engine's HTTP
// server). The pieces are exposed for the end-to-end tests, which run the server in-process.
#include <memory>
#include <string>

#include "policies/lm/serve.h"
#include "server/http_server.h"

namespace crl::cli {

// Reads the checkpoint (scenarios/checkpoint.h format, an "lm" policy state) and the tokenizer
// (make_tokenizer spec). Throws crl::Error naming the file when either is bad, when the checkpoint records
// another tokenizer's fingerprint, or when the tokenizer has more tokens than the model; for the cuda
// backend also when no device is usable or the model uses rope.
std::unique_ptr<lm::LmService> load_lm_service(const std::string& checkpoint, const std::string& tokenizer,
                                               const std::string& name,
                                               lm::LmBackend backend = lm::LmBackend::kCpu);

// Routes every request but GET /health and /metrics to `service` (which must outlive the server).
void serve_lm_routes(const lm::LmService& service, server::HttpOptions& http);

}  // namespace crl::cli
