#pragma once
// Shared option handling for subcommands: Boost.Program_options with one-line errors that name the option.
#include <boost/program_options.hpp>
#include <iostream>
#include <string>
#include <vector>

namespace crl::cli {

namespace po = boost::program_options;

// Parses `args` against `options` (and `positional`). Returns false after printing help (`--help`) or a
// one-line error; `exit_code` is then 0 (help) or 2 (usage error).
bool parse_options(const std::string& command, const std::string& usage,
                   const po::options_description& options,
                   const po::positional_options_description& positional, const std::vector<std::string>& args,
                   po::variables_map& vm, int& exit_code);

// The help of --default-chat-template-kwargs, on every command that renders prompts with a chat template.
// --wait-for-llm (crl serve --llm, crl rollout), as policies/llm/served_models.h wait_for_served_models.
inline constexpr const char* kWaitForLlmHelp =
    "seconds to wait at start for the LLM server to list its models (GET /v1/models: --capacity must fit the "
    "model's max_model_len, and a named model must be one it serves), failing when it has not answered by "
    "then; 0: ask once, and only warn when it does not answer";
inline constexpr const char* kTemplateKwargsHelp =
    "JSON object: variables of the --chat-template's Jinja template on every render, as vLLM's option of "
    "this name (Qwen3: '{\"enable_thinking\": false}' puts the empty think block into the generation "
    "prompt); a gateway session's own chat_template_kwargs (of its first call) go over them";

}  // namespace crl::cli
