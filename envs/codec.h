#pragma once
// A codec turns an environment's observations into context tokens and sampled tokens back into actions.
// Two kinds:
//  * TextCodec: a tokenizer plus a chat template (engine/chat_template.h; by default ChatML as Qwen uses it).
//    System and user turns are rendered "<|im_start|>ROLE\nTEXT<|im_end|>\n"; each assistant turn opens with
//    "<|im_start|>assistant\n" and the policy ends it by sampling "<|im_end|>" (if it does not, the codec
//    closes the turn itself). Another template (plain) replaces these strings. The summary instruction and
//    the resume preface are configurable text (TextPrompts), and so is an optional reasoning block
//    (Reasoning: "<think> ... </think>" before the answer, as Qwen3 and DeepSeek-R1 write it).
//  * SymbolicCodec: observations are the environment's symbol ids, actions are symbols, and the template
//    symbols come from the environment's spec.
// The codec never re-encodes sampled tokens for training: decode() exists for actions and for reading.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/context.h"
#include "engine/tokenizer.h"
#include "envs/env.h"

namespace crl {

// A reasoning block at the start of an action, as reasoning models write one ("<think>notes</think>answer";
// vLLM's and SGLang's reasoning parsers split it off the same way). Its tokens are the policy's like any
// other (sampled, trained, kept in the context); the environment is given only the answer after it, so an
// environment's action grammar stays what it is. Empty `open`: no reasoning block (the default).
struct Reasoning {
  std::string open;
  std::string close;
  bool enabled() const { return !open.empty(); }
  bool operator==(const Reasoning&) const = default;
};

// "<think>" / "</think>": the markers of Qwen3 and DeepSeek-R1, what a user of a reasoning model expects.
Reasoning think_reasoning();

// What the environment is given of `text` under `reasoning`: text that starts (after whitespace) with the
// open marker -> what follows the first close marker after it, leading whitespace removed, or "" when the
// block never closes (the turn ended while reasoning: no answer, which the environment rejects as any empty
// action); any other text unchanged, as is everything when reasoning is off.
std::string answer_after_reasoning(const std::string& text, const Reasoning& reasoning);

class Codec {
 public:
  virtual ~Codec() = default;
  virtual std::string view_name() const = 0;  // "text" | "symbolic"
  virtual ContextTemplate context_template() const = 0;
  // The system turn and the first user turn of an episode.
  virtual std::vector<TokenId> encode_system(const Observation& system) const = 0;
  virtual std::vector<TokenId> encode_user(const Observation& user) const = 0;
  // Everything between an assistant action and the next assistant turn: the close of the assistant turn
  // (if the action did not sample it) and the observation turn.
  virtual std::vector<TokenId> encode_observation(const Observation& observation,
                                                  std::span<const TokenId> action) const = 0;
  virtual Action decode_action(std::span<const TokenId> tokens) const = 0;
  // The reasoning block this codec strips from actions (empty: none; always empty for the symbolic view).
  virtual Reasoning reasoning() const { return {}; }
  // Tokens of an assistant turn written as text (scripted policies; clients that send only text): the text
  // view encodes it and ends the turn with "<|im_end|>"; the symbolic view reads space-separated symbol
  // names. Throws crl::Error for an unknown symbol name.
  virtual std::vector<TokenId> encode_action(const std::string& text) const = 0;
  // The part of a sampled summary that is copied into the resume message (without an end-of-turn token).
  virtual std::span<const TokenId> summary_body(std::span<const TokenId> summary) const = 0;
  virtual std::string decode(std::span<const TokenId> tokens) const = 0;
  virtual std::string fingerprint() const = 0;
  // The text view's tokenizer (a policy that writes text samples its ids); null for the symbolic view.
  virtual std::shared_ptr<const Tokenizer> tokenizer() const { return nullptr; }
};

struct TextPrompts {
  // q_sum (spec 1.1): the instruction appended to the history to ask for a summary.
  std::string summary_instruction =
      "Your context is full and will be compacted. Write a summary from which you can continue the task "
      "alone: the original task, the actions taken, the key observations with exact identifiers and values, "
      "unresolved errors, the current state and the next steps. Do not invent progress.";
  // The preface of resume(S): one user turn holding this text followed by the summary.
  std::string resume_preface =
      "The earlier history of this task was compacted into the summary below. Continue the same task from "
      "it; the recent outputs that follow are authoritative; do not redo finished work.\n\nSummary:\n";
  std::string truncation_marker = "\n[... observation truncated ...]\n";
  Reasoning reasoning;  // off by default
};

// Throws crl::Error if the tokenizer lacks the template's special tokens.
std::shared_ptr<const Codec> make_text_codec(std::shared_ptr<const Tokenizer> tokenizer,
                                             TextPrompts prompts = {}, ChatTemplate chat = chatml_template());
// Throws crl::Error if the environment declares no symbolic view.
std::shared_ptr<const Codec> make_symbolic_codec(const EnvSpec& spec);
// "text" (with the built-in byte tokenizer) or "symbolic".
std::shared_ptr<const Codec> make_codec(const std::string& view, const EnvSpec& spec);

}  // namespace crl
