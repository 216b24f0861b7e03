#pragma once
// `crl tokenize --train`: byte-level BPE training into a tokenizer.json (cli/tokenize_train.cpp).
#include <string>
#include <vector>

#include "engine/bpe_trainer.h"

namespace crl::cli {

// The synthetic suite's episodes of `split` as text, one document per task: the system prompt, the task,
// every oracle action and observation, and the oracle's summaries after 8 and 16 records.
std::vector<std::string> synthetic_corpus(const std::string& split);

// Trains on `corpus` (a text file, or "synthetic:SPLIT"), writes `out` atomically, reads it back with the
// engine's loader, checks the round trip of every document and prints the statistics (tokens per document
// before and after). Throws crl::Error for bad options or input.
int train_tokenizer(const std::string& corpus, const BpeTrainOptions& options, const std::string& out);

}  // namespace crl::cli
