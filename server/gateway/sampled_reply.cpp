#include "server/gateway/sampled_reply.h"

namespace crl::server::gateway {

AssistantReply read_sampled_reply(std::string& text, ToolCallFormat tool_format, ReasoningFormat reasoning,
                                  const ToolChoice& choice, const nlohmann::ordered_json& tools,
                                  const std::string& id_prefix) {
  AssistantReply reply;
  if (tool_format == ToolCallFormat::kHarmony) {  // its channels say what is reasoning
    reply = read_reply(ToolCallFormat::kHarmony, text, id_prefix, tools);
    if (!choice.reads_calls() && !reply.tool_calls.empty()) reply = AssistantReply{std::move(text), {}, {}};
    return reply;
  }
  const SplitAnswer split = split_reasoning(reasoning, text);
  if (choice.forced())  // sampled under the calls' grammar (tool_choice.h)
    reply = read_forced_calls(split.content, id_prefix);
  else if (choice.reads_calls())
    reply = read_reply(tool_format, split.content, id_prefix, tools);
  else
    reply.content =
        std::string(split.content);  // (tool_choice "none": the text as it is, as vLLM answers it)
  reply.reasoning = std::string(split.reasoning);
  return reply;
}

}  // namespace crl::server::gateway
