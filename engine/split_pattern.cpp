// The pre-tokenizer split patterns of the byte-level BPE tokenizers (engine/bpe_tokenizer.h SplitPattern):
// the regexes of GPT-2, cl100k, o200k, Qwen2 and Mistral's tekken, and DeepSeek-V3's sequence of three
// splits, implemented by hand over the Unicode tables with the leftmost-first semantics of the regex each
// stands for.
#include <algorithm>
#include <array>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/bpe_tokenizer.h"
#include "engine/error.h"
#include "engine/unicode_data.h"

namespace crl {

// ---------------------------------------------------------------------------------------------------------
// Split patterns
// ---------------------------------------------------------------------------------------------------------

namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kCl100kRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kO200kRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's tekken (Mistral NeMo, Small, Devstral): o200k's without the contractions, one digit at a time.
constexpr std::string_view kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr std::string_view kWordsRegex = R"(\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+|\s+)";

// DeepSeek-V3 (and R1, V3.1, which share its tokenizer.json): three Split pre-tokenizers in sequence, each
// "Isolated" (its matches and the text between them become pieces) and applied to the previous one's
// pieces, then ByteLevel without a regex.
constexpr std::string_view kDeepSeekDigitsRegex = R"(\p{N}{1,3})";
constexpr std::string_view kDeepSeekCjkRegex = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
// (Its line-break classes hold the characters CR and LF themselves, not the escapes, as the file has them.)
constexpr std::string_view kDeepSeekWordsRegex =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

struct Unit {
  uint32_t begin;
  char32_t cp;
  uint8_t props;
};

// One scan of the text, then the leftmost-first match of the pattern's alternatives at each position.
class Splitter {
 public:
  Splitter(SplitPattern pattern, std::string_view text) : pattern_(pattern) {
    units_.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      char32_t cp;
      const size_t length = unicode::decode_utf8(text, i, &cp);
      units_.push_back(
          Unit{static_cast<uint32_t>(i), cp, cp == unicode::kInvalid ? uint8_t{0} : unicode::properties(cp)});
      i += length;
    }
    n_ = units_.size();
    lim_ = n_;
    end_ = text.size();
  }

  std::vector<size_t> split() {
    if (pattern_ == SplitPattern::kDeepSeekV3) return split_deepseek();
    std::vector<size_t> ends;
    size_t i = 0;
    while (i < n_) {
      size_t e = match(i);
      CRL_CHECK(e > i, "the split pattern matched nothing at unit " << i);
      ends.push_back(e < n_ ? units_[e].begin : end_);
      i = e;
    }
    return ends;
  }

 private:
  // The classes at unit k, false past lim_ (the end of the text, or of the piece a sequence splits).
  bool L(size_t k) const { return k < lim_ && unicode::is_letter(units_[k].props); }
  bool N(size_t k) const { return k < lim_ && unicode::is_number(units_[k].props); }
  bool S(size_t k) const { return k < lim_ && unicode::is_space(units_[k].props); }
  bool R(size_t k) const { return k < lim_ && (units_[k].cp == '\r' || units_[k].cp == '\n'); }
  bool P(size_t k) const { return k < lim_ && !S(k) && !L(k) && !N(k); }       // [^\s\p{L}\p{N}]
  bool Prefix(size_t k) const { return k < lim_ && !R(k) && !L(k) && !N(k); }  // [^\r\n\p{L}\p{N}]
  char32_t cp(size_t k) const { return k < lim_ ? units_[k].cp : 0; }
  uint8_t cat(size_t k) const { return k < lim_ ? (units_[k].props & unicode::kCategoryMask) : 0; }
  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  bool Upper(size_t k) const {
    const uint8_t c = cat(k);
    return k < lim_ && (c == unicode::kLu || c == unicode::kLt || c == unicode::kLm || c == unicode::kLo ||
                        c == unicode::kMark);
  }
  // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
  bool Lower(size_t k) const {
    const uint8_t c = cat(k);
    return k < lim_ && (c == unicode::kLl || c == unicode::kLm || c == unicode::kLo || c == unicode::kMark);
  }
  // [\p{P}\p{S}], with invalid UTF-8 as U+FFFD (a symbol, So) as the reference decodes it.
  bool PS(size_t k) const {
    return k < lim_ && (unicode::is_punct_or_symbol(units_[k].props) || units_[k].cp == unicode::kInvalid);
  }
  bool LM(size_t k) const {
    return k < lim_ && (unicode::is_letter(units_[k].props) || cat(k) == unicode::kMark);
  }
  bool AsciiLetter(size_t k) const {
    const char32_t c = cp(k);
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
  }
  // [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]
  bool Cjk(size_t k) const {
    const char32_t c = cp(k);
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF);
  }
  // Simple case folding, as (?i) applies it to the contraction letters (U+017F LONG S folds to s).
  char32_t fold(char32_t c) const {
    if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
    if (c == 0x17F) return 's';
    return c;
  }
  // 's|'t|'re|'ve|'m|'ll|'d at k; returns the length in units or 0.
  size_t contraction(size_t k, bool ignore_case) const {
    if (cp(k) != '\'') return 0;
    const auto f = [&](size_t j) { return ignore_case ? fold(cp(j)) : cp(j); };
    const char32_t a = f(k + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    const char32_t b = f(k + 2);
    if ((a == 'r' || a == 'v') && b == 'e') return 3;
    if (a == 'l' && b == 'l') return 3;
    return 0;
  }
  size_t space_run_end(size_t k) const {
    while (S(k)) ++k;
    return k;
  }
  // \s*[\r\n]+ : the whitespace run up to and including its last line break.
  size_t spaces_then_newlines(size_t i, size_t run_end) const {
    for (size_t k = run_end; k > i; --k) {
      if (R(k - 1)) return k;
    }
    return 0;
  }
  // \s+(?!\S) then \s+.
  size_t trailing_spaces(size_t i, size_t run_end) const {
    if (run_end == lim_ || run_end - i < 2) return run_end;
    return run_end - 1;
  }

  size_t match(size_t i) const {
    switch (pattern_) {
      case SplitPattern::kGpt2:
        return match_gpt2(i);
      case SplitPattern::kCl100k:
        return match_cl100k(i, 3);
      case SplitPattern::kQwen2:
        return match_cl100k(i, 1);
      case SplitPattern::kO200k:
        return match_o200k(i, true, 3);
      case SplitPattern::kTekken:
        return match_o200k(i, false, 1);
      case SplitPattern::kWords:
        return match_words(i);
      case SplitPattern::kDeepSeekV3:
        break;  // (split_deepseek)
    }
    return i + 1;
  }

  // DeepSeek-V3's sequence. The first two splits (\p{N}{1,3}, then runs of CJK ideographs and kana) cut the
  // text into digit groups of at most three, CJK runs and runs of everything else; the third regex runs in
  // each piece (its lookahead sees the piece's end as the end of the text), and what it does not match
  // between its matches is a piece too.
  std::vector<size_t> split_deepseek() {
    std::vector<size_t> ends;
    const auto offset = [&](size_t k) { return k < n_ ? static_cast<size_t>(units_[k].begin) : end_; };
    for (size_t i = 0; i < n_;) {
      lim_ = n_;
      size_t piece_end = i;
      if (N(i)) {
        while (piece_end < n_ && piece_end - i < 3 && N(piece_end)) ++piece_end;
      } else if (Cjk(i)) {
        while (Cjk(piece_end)) ++piece_end;
      } else {
        while (piece_end < n_ && !N(piece_end) && !Cjk(piece_end)) ++piece_end;
      }
      lim_ = piece_end;
      bool in_gap = false;
      for (size_t k = i; k < piece_end;) {
        const size_t e = match_deepseek(k);
        if (e == 0) {  // no alternative matches here: the unit joins the gap before the next match
          in_gap = true;
          ++k;
          continue;
        }
        if (in_gap) ends.push_back(offset(k));
        in_gap = false;
        ends.push_back(offset(e));
        k = e;
      }
      if (in_gap) ends.push_back(offset(piece_end));
      i = piece_end;
    }
    lim_ = n_;
    return ends;
  }

  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
  // ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ at i (within lim_); 0 when nothing matches.
  size_t match_deepseek(size_t i) const {
    const char32_t c = cp(i);
    const bool ascii_punct = (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
                             (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
    if (ascii_punct && AsciiLetter(i + 1)) return run(i + 1, &Splitter::AsciiLetter);
    // The optional class, taken first: a unit that is not a line break, a letter, punctuation or a symbol.
    if (!R(i) && !L(i) && !PS(i) && LM(i + 1)) return run(i + 1, &Splitter::LM);
    if (LM(i)) return run(i, &Splitter::LM);
    const size_t j = c == ' ' ? i + 1 : i;
    if (PS(j)) return run(run(j, &Splitter::PS), &Splitter::R);
    if (!S(i)) return 0;
    const size_t run_end = space_run_end(i);
    if (const size_t e = spaces_then_newlines(i, run_end)) return e;
    return trailing_spaces(i, run_end);
  }

  // \p{L}+|\p{N}+|[^\s\p{L}\p{N}]+|\s+ (every unit is in exactly one class, so the runs tile the text).
  size_t match_words(size_t i) const {
    if (L(i)) return run(i, &Splitter::L);
    if (N(i)) return run(i, &Splitter::N);
    if (P(i)) return run(i, &Splitter::P);
    return std::max(space_run_end(i), i + 1);
  }

  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  size_t match_gpt2(size_t i) const {
    if (const size_t c = contraction(i, false)) return i + c;
    const size_t j = cp(i) == ' ' ? i + 1 : i;  // " ?" (without it, the class below cannot match a space)
    if (L(j)) return run(j, &Splitter::L);
    if (N(j)) return run(j, &Splitter::N);
    if (P(j)) return run(j, &Splitter::P);
    return trailing_spaces(i, space_run_end(i));
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  size_t match_cl100k(size_t i, size_t max_digits) const {
    if (const size_t c = contraction(i, true)) return i + c;
    if (L(i)) return run(i, &Splitter::L);
    if (Prefix(i) && L(i + 1)) return run(i + 1, &Splitter::L);
    if (N(i)) {
      size_t e = i;
      while (e - i < max_digits && N(e)) ++e;
      return e;
    }
    const size_t j = cp(i) == ' ' ? i + 1 : i;
    if (P(j)) return run(run(j, &Splitter::P), &Splitter::R);
    const size_t run_end = space_run_end(i);
    if (const size_t e = spaces_then_newlines(i, run_end)) return e;
    return trailing_spaces(i, run_end);
  }

  // [^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]*[Ll Lm Lo M]+(?i:'s|...)?|[^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]+[Ll Lm Lo
  // M]*
  // (?i:'s|...)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  // (tekken: without the contractions, and \p{N} for \p{N}{1,3}).
  size_t match_o200k(size_t i, bool contractions, size_t max_digits) const {
    const auto suffix = [&](size_t e) { return contractions ? e + contraction(e, true) : e; };
    // The optional prefix is tried taken first, then not taken (a mark can be either).
    const size_t starts[2] = {Prefix(i) ? i + 1 : SIZE_MAX, i};
    for (size_t s : starts) {  // first alternative
      if (s == SIZE_MAX) continue;
      const size_t u = run(s, &Splitter::Upper);
      // Backtracking [Upper]* from its longest run: the first position k (from the right) where [Lower]+ can
      // start; [Lower]+ then runs greedily from k.
      for (size_t k = u + 1; k-- > s;) {
        if (Lower(k)) {
          const size_t e = run(k, &Splitter::Lower);
          return suffix(e);
        }
      }
    }
    for (size_t s : starts) {  // second alternative
      if (s == SIZE_MAX) continue;
      const size_t u = run(s, &Splitter::Upper);
      if (u > s) {
        const size_t e = run(u, &Splitter::Lower);
        return suffix(e);
      }
    }
    if (N(i)) {
      size_t e = i;
      while (e - i < max_digits && N(e)) ++e;
      return e;
    }
    const size_t j = cp(i) == ' ' ? i + 1 : i;
    if (P(j)) {
      size_t e = run(j, &Splitter::P);
      while (R(e) || cp(e) == '/') ++e;
      return e;
    }
    const size_t run_end = space_run_end(i);
    if (const size_t e = spaces_then_newlines(i, run_end)) return e;
    return trailing_spaces(i, run_end);
  }

  size_t run(size_t k, bool (Splitter::*in)(size_t) const) const {
    while ((this->*in)(k)) ++k;
    return k;
  }

  SplitPattern pattern_;
  std::vector<Unit> units_;
  size_t n_ = 0, lim_ = 0, end_ = 0;
};

}  // namespace

std::optional<SplitPattern> split_pattern_from_name(std::string_view name) {
  if (name == "gpt2" || name == "r50k" || name == "p50k") return SplitPattern::kGpt2;
  if (name == "cl100k") return SplitPattern::kCl100k;
  if (name == "o200k") return SplitPattern::kO200k;
  if (name == "qwen2") return SplitPattern::kQwen2;
  if (name == "tekken") return SplitPattern::kTekken;
  if (name == "words") return SplitPattern::kWords;
  if (name == "deepseek_v3") return SplitPattern::kDeepSeekV3;
  return std::nullopt;
}

std::string_view split_pattern_name(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return "gpt2";
    case SplitPattern::kCl100k:
      return "cl100k";
    case SplitPattern::kO200k:
      return "o200k";
    case SplitPattern::kQwen2:
      return "qwen2";
    case SplitPattern::kTekken:
      return "tekken";
    case SplitPattern::kWords:
      return "words";
    case SplitPattern::kDeepSeekV3:
      return "deepseek_v3";
  }
  return "?";
}

std::string_view split_pattern_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return kGpt2Regex;
    case SplitPattern::kCl100k:
      return kCl100kRegex;
    case SplitPattern::kO200k:
      return kO200kRegex;
    case SplitPattern::kQwen2:
      return kQwen2Regex;
    case SplitPattern::kTekken:
      return kTekkenRegex;
    case SplitPattern::kWords:
      return kWordsRegex;
    case SplitPattern::kDeepSeekV3:
      return kDeepSeekWordsRegex;  // (the last of its three: deepseek_split_regexes() has all)
  }
  return "";
}

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kCl100k, SplitPattern::kO200k,
                         SplitPattern::kQwen2, SplitPattern::kTekken, SplitPattern::kWords}) {
    if (regex == split_pattern_regex(p)) return p;
  }
  return std::nullopt;
}

std::array<std::string_view, 3> deepseek_split_regexes() {
  return {kDeepSeekDigitsRegex, kDeepSeekCjkRegex, kDeepSeekWordsRegex};
}

std::vector<size_t> pre_tokenize(SplitPattern pattern, std::string_view text) {
  return Splitter(pattern, text).split();
}

}  // namespace crl
