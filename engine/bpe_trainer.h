#pragma once
// Byte-level BPE training: learns merges from a corpus and writes a standard Hugging Face tokenizer.json
// (ByteLevel pre-tokenizer and decoder, model BPE with vocab and merges, special tokens as added tokens)
// that BpeTokenizer::load_hf_json reads back (`crl tokenize --train`).
//
// The algorithm (the classic one of Sennrich et al. and of Hugging Face's BpeTrainer):
//  1. special-token strings are cut out of every document (they are never merged across);
//  2. the rest is split into pieces by the pre-tokenizer pattern (`pattern`: GPT-2 by default, what the
//     ByteLevel pre-tokenizer with use_regex true does at encoding time; any other pattern is written as
//     Sequence[Split(its regex, Isolated), ByteLevel(use_regex false)], as Qwen's and Llama 3's files are);
//     equal pieces are counted once with their frequency;
//  3. every piece starts as its UTF-8 bytes (ids 0..255 are the 256 bytes, in byte order);
//  4. repeatedly, the adjacent pair with the highest count over all pieces (overlapping pairs counted, as
//     HF does) becomes a merge and a new token (ids 256, 257, ... in merge order), and every piece is
//     rewritten left to right (non-overlapping, leftmost first, as the encoder applies a merge);
//  5. it stops when the vocabulary (256 bytes + merges + special tokens) reaches vocab_size, or when the
//     best pair occurs fewer than min_frequency times (a small corpus then gives a smaller vocabulary).
// Ties: among pairs with equal counts the one with the smaller (left id, right id), compared as numbers,
// wins. Ids depend only on the corpus, so training is deterministic: the same documents (in any order:
// counts are sums) and options give the same bytes. A merge whose byte string is already a token (from
// another pair) reuses that token's id and adds no vocabulary entry.
// Special tokens take the ids after the last merge, in the order given, and are listed both in model.vocab
// and in added_tokens (as HF's trainer does).
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/bpe_tokenizer.h"

namespace crl {

struct BpeTrainOptions {
  int vocab_size = 512;  // bytes + merges + special tokens, at most
  int min_frequency = 2;
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  SplitPattern pattern = SplitPattern::kGpt2;  // the pre-tokenizer (engine/bpe_tokenizer.h)
};

struct BpeModel {
  std::vector<std::string> vocab;           // id -> bytes (specials included, at the end)
  std::vector<std::pair<int, int>> merges;  // in rank order: (left id, right id)
  std::vector<std::string> special_tokens;  // ids vocab.size() - special_tokens.size() ...
  SplitPattern pattern = SplitPattern::kGpt2;
  int64_t pieces = 0, distinct_pieces = 0;  // corpus statistics
};

// Throws crl::Error naming the option for a vocab_size below 256 + specials, an empty or duplicate special
// token, or min_frequency < 1.
BpeModel train_bpe(std::span<const std::string> documents, const BpeTrainOptions& options);

// The tokenizer.json text (UTF-8, keys in a fixed order, vocab in id order, merges as "LEFT RIGHT").
std::string bpe_tokenizer_json(const BpeModel& model);

}  // namespace crl
