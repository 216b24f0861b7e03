// libFuzzer target for the tokenizer.json reader (engine/tokenizer_json.cpp): `--tokenizer PATH.json` reads
// whatever a model repository ships, so the file is untrusted input.
//
// Input: the file's text. Properties: nothing crashes and nothing allocates beyond what the file's size
// accounts for; a file that is refused is refused with crl::Error (which names the file and the field), never
// another exception; a file that loads encodes every probe text to ids below its vocab_size, and decodes
// them back to the text (NFC text: a file may ask for NFC normalization; an added token's text comes back as
// itself). Each probe is encoded twice (the second time from the tokenizer's cache of merged pieces) to the
// same ids.
//
// Built by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined; tests/fuzz/CMakeLists.txt) with
// CRL_LIBFUZZER defined; the engine tests compile the same function without it and replay the seed corpus
// (tests/fuzz/corpus/tokenizer_json).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/bpe_tokenizer.h"
#include "engine/error.h"

namespace crl {

namespace {

[[noreturn]] void fail(const char* what, std::string_view detail, std::string_view input) {
  std::fprintf(stderr, "tokenizer_json: %s: %.*s\n--- input ---\n%.*s\n", what,
               static_cast<int>(detail.size()), detail.data(), static_cast<int>(input.size()), input.data());
  std::abort();
}

}  // namespace

int fuzz_tokenizer_json(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::shared_ptr<const BpeTokenizer> tokenizer;
  try {
    tokenizer = BpeTokenizer::parse_hf_json(text, "models/fuzz/tokenizer.json");
  } catch (const Error&) {
    return 0;
  } catch (const std::exception& e) {
    fail("refused with an exception that is not crl::Error", e.what(), text);
  }
  static const std::vector<std::string> probes = {
      "",
      "hello world",
      "  two  spaces\n\nand lines\t",
      "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 123456 $x!",
      "<|im_start|>user\nhi<|im_end|><start_of_turn>",
      "he hel hell hello ab x b",
  };
  for (const std::string& probe : probes) {
    std::vector<TokenId> ids, again;
    std::string back;
    try {
      ids = tokenizer->encode(probe);
      again = tokenizer->encode(probe);
      for (const TokenId id : ids) {
        if (id < 0 || id >= tokenizer->vocab_size()) fail("an id outside the vocabulary", probe, text);
      }
      back = tokenizer->decode(ids);
    } catch (const std::exception& e) {
      fail("a loaded tokenizer threw on a probe", std::string(e.what()) + " on " + probe, text);
    }
    if (ids != again) fail("two encodings of one text differ", probe, text);
    if (back != probe) fail("decode(encode(text)) is not the text", probe + " -> " + back, text);
  }
  return 0;
}

}  // namespace crl

#ifdef CRL_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return crl::fuzz_tokenizer_json(data, size);
}
#endif
