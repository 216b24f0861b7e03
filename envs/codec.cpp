#include "envs/codec.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/sha256.h"

namespace crl {

Reasoning think_reasoning() {
  return Reasoning{"<think>", "</think>"};
}

std::string answer_after_reasoning(const std::string& text, const Reasoning& reasoning) {
  if (!reasoning.enabled()) return text;
  constexpr const char* kSpace = " \t\r\n";
  const size_t start = text.find_first_not_of(kSpace);
  if (start == std::string::npos || text.compare(start, reasoning.open.size(), reasoning.open) != 0)
    return text;
  const size_t close = text.find(reasoning.close, start + reasoning.open.size());
  if (close == std::string::npos) return "";
  const size_t answer = text.find_first_not_of(kSpace, close + reasoning.close.size());
  return answer == std::string::npos ? "" : text.substr(answer);
}

namespace {

class TextCodec final : public Codec {
 public:
  TextCodec(std::shared_ptr<const Tokenizer> tokenizer, TextPrompts prompts, ChatTemplate chat)
      : tokenizer_(std::move(tokenizer)), prompts_(std::move(prompts)), chat_(std::move(chat)) {
    const auto end = tokenizer_->special_token(chat_.end_of_turn);
    if (!end || (chat_.name == "chatml" && !tokenizer_->special_token("<|im_start|>"))) {
      throw Error("tokenizer " + quote(tokenizer_->name()), "chat template",
                  "the " + chat_.name + " template needs the special token " + quote(chat_.end_of_turn) +
                      (chat_.name == "chatml" ? " and \"<|im_start|>\"" : "") +
                      "; use a tokenizer that has it or another template (--chat-template plain)");
    }
    end_of_turn_ = *end;
  }

  std::string view_name() const override { return "text"; }

  ContextTemplate context_template() const override {
    ContextTemplate t;
    // Only the template's strings are template text; the configured prompts are content like any other.
    t.turn_header = tokenizer_->encode(chat_.assistant_prefix);
    const std::string close_and_open = chat_.user_suffix + chat_.assistant_prefix;
    const TextPiece instruction[] = {
        {chat_.user_prefix, true}, {prompts_.summary_instruction}, {close_and_open, true}};
    t.summary_instruction = tokenizer_->encode_pieces(instruction);
    // resume(S) follows the system turn (spec 1.1: system + resume + kept steps), as the first user turn
    // does: with Gemma's template the system turn opened it.
    const TextPiece resume[] = {{chat_.user_prefix_after_system(), true}, {prompts_.resume_preface}};
    t.resume_prefix = tokenizer_->encode_pieces(resume);
    t.resume_suffix = tokenizer_->encode(chat_.user_suffix);
    t.truncation_marker = tokenizer_->encode_ordinary(prompts_.truncation_marker);
    return t;
  }

  // Observations come from the environment: their text is content, never template (ChatML forgery).
  std::vector<TokenId> encode_system(const Observation& system) const override {
    return tokenizer_->encode_pieces(chat_.turn_pieces(ChatRole::kSystem, system.text));
  }
  std::vector<TokenId> encode_user(const Observation& user) const override {
    // The first user turn follows the system turn (Gemma's opened it: no header of its own).
    const TextPiece pieces[] = {
        {chat_.user_prefix_after_system(), true}, {user.text}, {chat_.user_suffix, true}};
    return tokenizer_->encode_pieces(pieces);
  }
  std::vector<TokenId> encode_observation(const Observation& observation,
                                          std::span<const TokenId> action) const override {
    const bool closed = !action.empty() && action.back() == end_of_turn_;
    const std::string close = (closed ? "" : chat_.end_of_turn) + chat_.after_end_of_turn + chat_.user_prefix;
    const TextPiece pieces[] = {{close, true}, {observation.text}, {chat_.user_suffix, true}};
    return tokenizer_->encode_pieces(pieces);
  }
  Action decode_action(std::span<const TokenId> tokens) const override {
    Action action;
    action.text = answer_after_reasoning(tokenizer_->decode(summary_body(tokens)), prompts_.reasoning);
    return action;
  }
  // A text action (scripted policies, clients) is content too: only the end of turn is a special id.
  std::vector<TokenId> encode_action(const std::string& text) const override {
    const TextPiece pieces[] = {{text}, {chat_.end_of_turn, true}};
    return tokenizer_->encode_pieces(pieces);
  }
  std::span<const TokenId> summary_body(std::span<const TokenId> summary) const override {
    if (!summary.empty() && summary.back() == end_of_turn_) return summary.first(summary.size() - 1);
    return summary;
  }
  std::string decode(std::span<const TokenId> tokens) const override { return tokenizer_->decode(tokens); }
  std::string fingerprint() const override {
    // The default template keeps the fingerprint it had before templates were configurable.
    const std::string chat = chat_ == chatml_template() ? "chatml" : chat_.definition();
    // Reasoning counts only when on, so codecs without it keep their earlier fingerprints.
    const std::string reasoning = prompts_.reasoning.enabled() ? "|reasoning|" + prompts_.reasoning.open +
                                                                     "|" + prompts_.reasoning.close
                                                               : "";
    return sha256_hex(chat + "|" + tokenizer_->fingerprint() + "|" + prompts_.summary_instruction + "|" +
                      prompts_.resume_preface + "|" + prompts_.truncation_marker + reasoning)
        .substr(0, 16);
  }
  std::shared_ptr<const Tokenizer> tokenizer() const override { return tokenizer_; }
  Reasoning reasoning() const override { return prompts_.reasoning; }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  TextPrompts prompts_;
  ChatTemplate chat_;
  TokenId end_of_turn_ = 0;
};

class SymbolicCodec final : public Codec {
 public:
  explicit SymbolicCodec(const EnvSpec& spec) : names_(spec.symbols), template_(spec.symbolic_template) {}

  std::string view_name() const override { return "symbolic"; }
  ContextTemplate context_template() const override {
    return ContextTemplate{template_.turn_header, template_.summary_instruction, template_.resume_prefix,
                           template_.resume_suffix, template_.truncation_marker};
  }
  std::vector<TokenId> encode_system(const Observation& system) const override {
    return checked(system.symbols);
  }
  std::vector<TokenId> encode_user(const Observation& user) const override { return checked(user.symbols); }
  std::vector<TokenId> encode_observation(const Observation& observation,
                                          std::span<const TokenId>) const override {
    return checked(observation.symbols);
  }
  Action decode_action(std::span<const TokenId> tokens) const override {
    Action action;  // symbolic environments read the symbols; the text stays empty (decode() is for reading)
    action.symbols.assign(tokens.begin(), tokens.end());
    return action;
  }
  std::vector<TokenId> encode_action(const std::string& text) const override {
    std::vector<TokenId> ids;
    size_t begin = 0;
    while (begin < text.size()) {
      const size_t end = std::min(text.find(' ', begin), text.size());
      const std::string name = text.substr(begin, end - begin);
      begin = end + 1;
      if (name.empty()) continue;
      const auto it = std::find(names_.begin(), names_.end(), name);
      if (it == names_.end()) throw Error("symbolic action", "text", "unknown symbol " + quote(name));
      ids.push_back(static_cast<TokenId>(it - names_.begin()));
    }
    return ids;
  }
  std::span<const TokenId> summary_body(std::span<const TokenId> summary) const override { return summary; }
  std::string decode(std::span<const TokenId> tokens) const override {
    std::string text;
    for (TokenId id : tokens) {
      if (!text.empty()) text += ' ';
      text +=
          (id >= 0 && static_cast<size_t>(id) < names_.size()) ? names_[id] : "<" + std::to_string(id) + ">";
    }
    return text;
  }
  std::string fingerprint() const override {
    std::string all = "symbolic";
    for (const std::string& name : names_) all += "|" + name;
    return sha256_hex(all).substr(0, 16);
  }

 private:
  std::vector<TokenId> checked(const std::vector<TokenId>& symbols) const {
    for (TokenId id : symbols) {
      CRL_CHECK(id >= 0 && static_cast<size_t>(id) < names_.size(),
                "symbol " << id << " outside the vocabulary");
    }
    return symbols;
  }
  std::vector<std::string> names_;
  SymbolicTemplate template_;
};

}  // namespace

std::shared_ptr<const Codec> make_text_codec(std::shared_ptr<const Tokenizer> tokenizer, TextPrompts prompts,
                                             ChatTemplate chat) {
  return std::make_shared<TextCodec>(std::move(tokenizer), std::move(prompts), std::move(chat));
}

std::shared_ptr<const Codec> make_symbolic_codec(const EnvSpec& spec) {
  if (spec.symbols.empty()) {
    throw Error("environment " + quote(spec.name), "view", "has no symbolic view (use view \"text\")");
  }
  return std::make_shared<SymbolicCodec>(spec);
}

std::shared_ptr<const Codec> make_codec(const std::string& view, const EnvSpec& spec) {
  if (view == "text") {
    if (!spec.has_text) throw Error("environment " + quote(spec.name), "view", "has no text view");
    return make_text_codec(std::make_shared<ByteTokenizer>());
  }
  if (view == "symbolic") return make_symbolic_codec(spec);
  throw Error("", "view", "value " + quote(view) + " is not one of text, symbolic");
}

}  // namespace crl
