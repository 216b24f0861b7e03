// `crl tokenize --train CORPUS --vocab N --out tokenizer.json`: byte-level BPE training
// (engine/bpe_trainer.h) on a text file or on the synthetic suite's episodes, written atomically, then read
// back with the engine's loader and checked to round-trip every document byte-exactly before the command
// reports success.
#include "cli/tokenize_train.h"

#include <iomanip>
#include <iostream>
#include <memory>

#include "engine/bpe_tokenizer.h"
#include "engine/bpe_trainer.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/rng.h"
#include "envs/registry.h"
#include "envs/synthetic/oracle.h"
#include "envs/synthetic/splits.h"
#include "envs/synthetic/synthetic_env.h"

namespace crl::cli {

std::vector<std::string> synthetic_corpus(const std::string& split) {
  bool known = false;
  for (std::string_view name : envs::synthetic::kSplitNames) known = known || name == split;
  if (!known) {
    throw Error(
        "--train", "synthetic:SPLIT",
        "unknown split " + quote(split) + " (expected synthetic:train, synthetic:dev or synthetic:test)");
  }
  // One environment per episode: the env keeps per-episode state, and the task list is shared (cached).
  std::vector<std::string> docs;
  const auto probe = make_env("synthetic", {{"split", split}, {"view", "text"}}, "--train");
  const auto& tasks = dynamic_cast<const envs::synthetic::SyntheticEnv&>(*probe).tasks().tasks;
  for (size_t k = 0; k < tasks.size(); ++k) {
    const auto& task = tasks[k];
    auto env = make_env("synthetic", {{"split", split}, {"view", "text"}}, "--train");
    const auto& synthetic = dynamic_cast<const envs::synthetic::SyntheticEnv&>(*env);
    Rng rng(StreamKey{0, k, 0, StreamRole::kEnvironment, 0});
    const Env::Start start = env->reset(Task{task.task_id, k, split}, rng);
    std::string doc = start.system.text + "\n" + start.user.text + "\n";
    envs::synthetic::Oracle oracle(task, /*symbolic=*/false);
    while (!env->done()) {
      // The oracle's summaries at the two points a text-view episode typically compacts (8 and 16 records),
      // so the corpus holds the summary language too.
      const int seen = synthetic.records_seen();
      if (seen == 8 || seen == 16) doc += oracle.summary_text(seen) + "\n";
      const Action action = oracle.act();
      doc += action.text + "\n";
      doc += env->step(action).observation.text + "\n";
    }
    docs.push_back(std::move(doc));
  }
  return docs;
}

int train_tokenizer(const std::string& corpus, const BpeTrainOptions& options, const std::string& out) {
  if (out.empty()) throw Error("--out", "out", "missing: --train needs --out PATH/tokenizer.json");
  if (out.size() < 5 || out.substr(out.size() - 5) != ".json") {
    throw Error("--out", "out", quote(out) + " must end in .json (the loader chooses the format by it)");
  }
  std::vector<std::string> docs;
  const std::string prefix = "synthetic:";
  if (corpus.rfind(prefix, 0) == 0) {
    docs = synthetic_corpus(corpus.substr(prefix.size()));
  } else {
    docs.push_back(read_file(corpus));
  }
  int64_t bytes = 0;
  for (const std::string& d : docs) bytes += static_cast<int64_t>(d.size());
  if (bytes == 0) throw Error(corpus, "--train", "the corpus is empty");

  const BpeModel model = train_bpe(docs, options);
  write_file_atomic(out, bpe_tokenizer_json(model));

  // Read it back with the loader every LLM command uses and check the round trip on the whole corpus.
  const auto tokenizer = BpeTokenizer::load_hf_json(out);
  int64_t tokens = 0;
  for (const std::string& d : docs) {
    const auto ids = tokenizer->encode_ordinary(d);
    if (tokenizer->decode(ids) != d) {
      throw Error(out, "", "internal error: the trained tokenizer does not round-trip the corpus");
    }
    tokens += static_cast<int64_t>(ids.size());
  }
  const double n = static_cast<double>(docs.size());
  std::cout << "trained " << out << ": vocabulary " << model.vocab.size() << " (256 bytes, "
            << model.vocab.size() - 256 - model.special_tokens.size() << " merged tokens, "
            << model.special_tokens.size() << " special), " << model.merges.size() << " merges\n"
            << "corpus: " << docs.size() << " document(s), " << bytes << " bytes, " << model.pieces
            << " pre-tokenizer pieces (" << model.distinct_pieces << " distinct)\n"
            << std::fixed << std::setprecision(1) << "tokens per document: " << bytes / n
            << " with the byte tokenizer, " << tokens / n << " with this one (" << std::setprecision(2)
            << static_cast<double>(bytes) / static_cast<double>(tokens) << " bytes per token)\n"
            << "fingerprint: " << tokenizer->fingerprint() << "\n";
  return 0;
}

}  // namespace crl::cli
