// `crl tokenize`: shows how a tokenizer (`--tokenizer`, the spec every LLM command takes, see
// engine/README.md) encodes a text, optionally rendered as one chat turn, or decodes ids. With --messages, a
// whole conversation (a JSON file: a list of messages, or {"messages", "tools", "add_generation_prompt",
// "extra"}) is rendered by the chat template (a model's Jinja template: --chat-template
// PATH/tokenizer_config.json) and the text and its ids are printed. For checking a tokenizer file and a chat
// template by hand before a run. With --train it learns a byte-level BPE tokenizer instead
// (cli/tokenize_train.h).
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/tokenize_train.h"
#include "engine/bpe_tokenizer.h"
#include "engine/chat_template.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/json_view.h"
#include "engine/tokenizer.h"

namespace crl::cli {
namespace {

ChatRole role_from_name(const std::string& name) {
  for (ChatRole role : {ChatRole::kSystem, ChatRole::kUser, ChatRole::kAssistant, ChatRole::kTool}) {
    if (chat_role_name(role) == name) return role;
  }
  throw Error("--role", "role",
              "unknown role " + quote(name) + " (expected system, user, assistant or tool)");
}

int run_tokenize(const std::vector<std::string>& args) {
  po::options_description options;
  std::string spec, file, chat, role, messages_file, chat_variables;
  std::vector<std::string> words;
  bool decode = false;
  std::string train, out;
  BpeTrainOptions train_options;
  std::vector<std::string> specials;
  std::string pattern = "gpt2";
  options.add_options()("tokenizer", po::value(&spec)->default_value("byte"),
                        "byte | PATH/tokenizer.json | PATH/NAME.tiktoken[#PATTERN]")(
      "file", po::value(&file), "encode this file's bytes instead of TEXT")(
      "chat-template", po::value(&chat),
      "render the text as one turn first (its special-token strings stay text): chatml | plain | PATH.jinja "
      "| "
      "PATH/tokenizer_config.json")("default-chat-template-kwargs", po::value(&chat_variables),
                                    kTemplateKwargsHelp)(
      "messages", po::value(&messages_file),
      "render this conversation (JSON: [messages] or {messages, tools, add_generation_prompt, extra}) with "
      "--chat-template and encode it")("role", po::value(&role)->default_value("user"),
                                       "the turn's role: system | user | assistant | tool")(
      "decode", po::bool_switch(&decode), "the arguments are token ids: print their text")(
      "text", po::value(&words)->multitoken(), "the text (the words are joined by spaces)")(
      "train", po::value(&train),
      "learn a byte-level BPE tokenizer from CORPUS (a text file or synthetic:SPLIT)")(
      "vocab", po::value(&train_options.vocab_size)->default_value(512),
      "--train: vocabulary size (256 bytes + merges + special tokens)")(
      "min-frequency", po::value(&train_options.min_frequency)->default_value(2),
      "--train: stop when the best pair occurs fewer times")(
      "special", po::value(&specials)->multitoken(),
      "--train: special tokens (default <|endoftext|> <|im_start|> <|im_end|>)")(
      "pattern", po::value(&pattern)->default_value(pattern),
      "--train: pre-tokenizer split pattern: gpt2 | cl100k | o200k | qwen2 | words (letters, digits, "
      "symbols and spaces apart: a value is the same token wherever it stands)")(
      "out", po::value(&out), "--train: where to write the tokenizer.json");
  po::positional_options_description positional;
  positional.add("text", -1);
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("tokenize",
                     "[--tokenizer SPEC] [--chat-template NAME|PATH [--role ROLE]] TEXT... | --file PATH "
                     "| --chat-template NAME|PATH --messages FILE.json | --decode ID... "
                     "| --train CORPUS --vocab N --out tokenizer.json",
                     options, positional, args, vm, exit_code)) {
    return exit_code;
  }
  if (!train.empty()) {
    if (vm.count("special")) train_options.special_tokens = specials;
    const auto split = split_pattern_from_name(pattern);
    if (split == SplitPattern::kDeepSeekV3) {
      throw Error(
          "--pattern", "pattern",
          "DeepSeek-V3's pre-tokenizer is a sequence of three splits, which a trained tokenizer.json's "
          "one Split cannot hold (expected gpt2, cl100k, o200k, qwen2, tekken or words)");
    }
    if (!split) {
      throw Error(
          "--pattern", "pattern",
          "unknown split pattern " + quote(pattern) + " (expected gpt2, cl100k, o200k, qwen2 or words)");
    }
    train_options.pattern = *split;
    return train_tokenizer(train, train_options, out);
  }
  // Nothing to encode (no TEXT, not even ""): a usage error, not an empty encoding.
  if (!vm.count("text") && file.empty() && messages_file.empty()) {
    std::cerr << "crl tokenize: give TEXT, --file, --messages, --decode ID... or --train (see 'crl tokenize "
                 "--help')\n";
    return 2;
  }
  const auto tokenizer = make_tokenizer(spec);
  std::cout << "tokenizer: " << tokenizer->name() << " (vocabulary " << tokenizer->vocab_size()
            << ", fingerprint " << tokenizer->fingerprint() << ")\n";
  std::string text;
  for (size_t k = 0; k < words.size(); ++k) text += (k ? " " : "") + words[k];
  if (decode) {
    std::vector<TokenId> ids;
    for (const std::string& w : words) {
      try {
        size_t used = 0;
        ids.push_back(std::stoi(w, &used));
        if (used != w.size()) throw std::invalid_argument(w);
      } catch (const std::exception&) {
        throw Error("--decode", "id", "not a token id: " + quote(w));
      }
    }
    std::cout << "text: "
              << nlohmann::json(tokenizer->decode(ids))
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
    return 0;
  }
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(file, "--file", "cannot open the file");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  }
  // Alone, the text is read as a template would be (special-token strings become their ids); rendered as a
  // turn, it is content, encoded as the text codec encodes an observation: ordinary text (issue 14 item 7).
  if (!chat_variables.empty() && chat.empty())
    throw Error("option --default-chat-template-kwargs", "",
                "needs --chat-template (a model's Jinja template)");
  std::vector<TokenId> ids;
  if (!messages_file.empty()) {
    // The rendered conversation is read as a prompt is: special-token strings become their ids.
    const ChatTemplate chat_template =
        with_template_variables(load_chat_template(chat.empty() ? "chatml" : chat), chat_variables);
    // Keys in the file's order (tools' `tojson`), as Python's json reads them.
    const std::string file_text = read_file(messages_file);
    const nlohmann::ordered_json doc = JsonDocument::parse(file_text, messages_file).root().to_ordered_json();
    ChatRenderRequest request;
    if (doc.is_array()) {
      request.messages = doc;
    } else if (doc.is_object()) {
      if (doc.contains("messages")) request.messages = doc["messages"];
      if (doc.contains("tools")) request.tools = doc["tools"];
      if (doc.contains("extra")) request.extra = doc["extra"];
      if (doc.contains("add_generation_prompt")) {
        if (!doc["add_generation_prompt"].is_boolean())
          throw Error(messages_file, "add_generation_prompt", "must be true or false");
        request.add_generation_prompt = doc["add_generation_prompt"].get<bool>();
      }
    } else {
      throw Error(messages_file, "", "must be a list of messages or an object with \"messages\"");
    }
    const std::string rendered = chat_template.render(request);
    std::cout << "text: "
              << nlohmann::json(rendered).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
    ids = tokenizer->encode(rendered);
  } else if (chat.empty()) {
    ids = tokenizer->encode(text);
  } else {
    const ChatTemplate chat_template = with_template_variables(load_chat_template(chat), chat_variables);
    chat_template.require_turns("option --chat-template");
    ids = tokenizer->encode_pieces(chat_template.turn_pieces(role_from_name(role), text));
  }
  std::cout << "tokens: " << ids.size() << "\nids:";
  for (TokenId id : ids) std::cout << " " << id;
  std::cout << "\npieces:";
  for (TokenId id : ids) {
    const std::string piece = tokenizer->decode(std::span<const TokenId>(&id, 1));
    std::cout << " " << nlohmann::json(piece).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::cout << "\n";
  return 0;
}

const CommandRegistrar kTokenize(Command{
    "tokenize", "show how a tokenizer (and chat template) encodes a text", run_tokenize});

}  // namespace
}  // namespace crl::cli
