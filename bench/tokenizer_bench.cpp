// Tokenizer throughput (issue 7): our byte-level BPE encoder beside the reference encoders, in the same run.
//   BM_TokenizerEncode/<Encoding>Cold our encode() of the corpus (one thread), the piece cache emptied first
//   BM_TokenizerEncode/<Encoding>Warm the same with the cache kept across passes
//   BM_NodeReferenceEncode/Tiktoken<Encoding>  OpenAI's tiktoken (Rust compiled to WebAssembly, npm
//   `tiktoken`)
//                                     in one node process started per iteration; the time is node's own
//                                     measurement of encode() over the same text (best of 3 repeats), so the
//                                     start-up and the file loading are excluded
//   BM_NodeReferenceEncode/TransformersJsQwen3  the Qwen3 tokenizer.json run by @lenml/tokenizers
//   BM_TokenizerEncode/Gemma3{Cold,Warm}, BM_NodeReferenceEncode/TransformersJsGemma3  Gemma 3's
//                                     SentencePiece-style tokenizer.json (byte fallback; merged and cached
//                                     word by word)
//   BM_TokenizerEncode/DeepSeekV3Cold, BM_NodeReferenceEncode/TransformersJsDeepSeekV3  DeepSeek-V3's
//                                     tokenizer.json (three Split pre-tokenizers in sequence)
// Times are CPU times on both sides (ours: the benchmark's CPU time; node: process.cpuUsage() around
// encode()), because the shared machine's wall-clock times move with its load; wall_MB_per_s gives node's
// wall-clock figure too.
// Corpus: 2 MB of tests/engine/tokenizer_corpus.h (valid UTF-8: prose in several scripts, code, digits,
// whitespace runs, emoji, CJK). Counters: MB_per_s (10^6 bytes of text per second) and tokens; the reference
// benchmarks fail when their token count differs from ours. References: tests/engine/tokenizer_oracle (run
// scripts/install_deps.sh); they are skipped with a message when node or the packages are missing.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "engine/bpe_tokenizer.h"
#include "tests/engine/tokenizer_corpus.h"

namespace crl {
namespace {

namespace fs = std::filesystem;

const std::string kOracleDir = std::string(CRL_SOURCE_DIR) + "/tests/engine/tokenizer_oracle";
const std::string kModules = kOracleDir + "/node_modules";

const std::string& corpus() {
  static const std::string text = [] {
    std::string all;
    for (const std::string& s : tokenizer_corpus::make(2026, 40000, false)) {
      all += s;
      if (all.size() >= 2'000'000) break;
    }
    return all;
  }();
  return text;
}

const std::string& corpus_file() {
  static const std::string path = [] {
    const std::string p =
        (fs::temp_directory_path() / ("crl_tokenizer_bench_" + std::to_string(::getpid()))).string();
    std::ofstream(p, std::ios::binary) << corpus();
    return p;
  }();
  return path;
}

bool is_tokenizer_json(const std::string& encoding) {
  return encoding == "qwen3" || encoding == "gemma3" || encoding == "deepseek_v3";
}

std::shared_ptr<const BpeTokenizer> load(const std::string& encoding) {
  static std::map<std::string, std::shared_ptr<const BpeTokenizer>> cache;
  auto& slot = cache[encoding];
  if (!slot) {
    if (is_tokenizer_json(encoding)) {
      const std::string file = kModules + "/@lenml/tokenizer-" + encoding + "/models/tokenizer.json";
      if (fs::exists(file)) slot = BpeTokenizer::load_hf_json(file);
    } else {
      const std::string file = kModules + "/gpt-tokenizer/data/" + encoding + ".tiktoken";
      const auto def = tiktoken_encoding(encoding);
      if (fs::exists(file)) slot = BpeTokenizer::load_tiktoken(file, def->first, def->second);
    }
  }
  return slot;
}

const char* kMissing = "reference files missing: run scripts/install_deps.sh (needs npm)";

// A tokenizer.json encodes with its added tokens split out (what the reference does); tiktoken ordinary.
std::vector<TokenId> encode_as_reference(const BpeTokenizer& tokenizer, const std::string& encoding,
                                         const std::string& text) {
  return is_tokenizer_json(encoding) ? tokenizer.encode(text) : tokenizer.encode_ordinary(text);
}

// Cold: the cache of merged pieces is emptied before each pass (pieces repeated within the pass still hit
// it), as on first contact with a text; warm: the cache keeps what earlier passes merged.
void BM_TokenizerEncode(benchmark::State& state, const std::string& encoding, bool warm) {
  const auto tokenizer = load(encoding);
  if (!tokenizer) return state.SkipWithError(kMissing);
  const std::string& text = corpus();
  size_t tokens = 0;
  for (auto _ : state) {
    if (!warm) {
      state.PauseTiming();
      tokenizer->clear_cache();
      state.ResumeTiming();
    }
    const auto ids = encode_as_reference(*tokenizer, encoding, text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(tokens));
  state.counters["MB_per_s"] = benchmark::Counter(static_cast<double>(text.size()) * state.iterations() / 1e6,
                                                  benchmark::Counter::kIsRate);
  state.counters["tokens"] = static_cast<double>(tokens);
}

// node oracle.js bench ENCODING FILE 3 -> {"bytes":N,"tokens":N,"seconds":S,"cpu_seconds":C}
void BM_NodeReferenceEncode(benchmark::State& state, const std::string& encoding) {
  const auto tokenizer = load(encoding);
  if (!tokenizer || std::system("command -v node >/dev/null 2>&1") != 0) return state.SkipWithError(kMissing);
  const std::string& text = corpus();
  const size_t our_tokens = encode_as_reference(*tokenizer, encoding, text).size();
  const std::string command =
      "node " + kOracleDir + "/oracle.js bench " + encoding + " " + corpus_file() + " 3";
  double tokens = 0, total_seconds = 0, total_wall = 0;
  for (auto _ : state) {
    FILE* pipe = ::popen(command.c_str(), "r");
    char line[512] = {};
    const bool read = pipe != nullptr && fgets(line, sizeof line, pipe) != nullptr;
    if (pipe) ::pclose(pipe);
    double bytes = 0, seconds = 0, cpu_seconds = 0;
    if (!read || std::sscanf(line, "{\"bytes\":%lf,\"tokens\":%lf,\"seconds\":%lf,\"cpu_seconds\":%lf}",
                             &bytes, &tokens, &seconds, &cpu_seconds) != 4) {
      return state.SkipWithError(("cannot run " + command).c_str());
    }
    if (static_cast<size_t>(tokens) != our_tokens) {
      return state.SkipWithError(("the reference produced " + std::to_string(static_cast<size_t>(tokens)) +
                                  " tokens, ours " + std::to_string(our_tokens))
                                     .c_str());
    }
    state.SetIterationTime(cpu_seconds);
    total_seconds += cpu_seconds;
    total_wall += seconds;
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(tokens));
  state.counters["MB_per_s"] = static_cast<double>(text.size()) * state.iterations() / 1e6 / total_seconds;
  state.counters["wall_MB_per_s"] = static_cast<double>(text.size()) * state.iterations() / 1e6 / total_wall;
  state.counters["tokens"] = tokens;
}

BENCHMARK_CAPTURE(BM_TokenizerEncode, Cl100kCold, std::string("cl100k_base"), false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, Cl100kWarm, std::string("cl100k_base"), true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_NodeReferenceEncode, TiktokenCl100k, std::string("cl100k_base"))
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, O200kCold, std::string("o200k_base"), false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, O200kWarm, std::string("o200k_base"), true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_NodeReferenceEncode, TiktokenO200k, std::string("o200k_base"))
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, Qwen3Cold, std::string("qwen3"), false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, Qwen3Warm, std::string("qwen3"), true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_NodeReferenceEncode, TransformersJsQwen3, std::string("qwen3"))
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, Gemma3Cold, std::string("gemma3"), false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, Gemma3Warm, std::string("gemma3"), true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, DeepSeekV3Cold, std::string("deepseek_v3"), false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_NodeReferenceEncode, TransformersJsDeepSeekV3, std::string("deepseek_v3"))
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_NodeReferenceEncode, TransformersJsGemma3, std::string("gemma3"))
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace crl
