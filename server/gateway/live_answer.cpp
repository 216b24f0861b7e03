#include "server/gateway/live_answer.h"

#include "server/gateway/stream_keepalive.h"

namespace crl::server::gateway {

void LiveAnswer::start(const Completion& header, const Codec& codec, LiveRules rules) {
  header_.id = header.id;
  header_.created = header.created;
  header_.prompt_tokens = header.prompt_tokens;
  codec_ = &codec;
  reply_.emplace(std::move(rules));
  decoded_ = 0;
  shown_ = StreamShown{};
}

void LiveAnswer::sampled(const llm::GenerateResult& so_far) {
  if (!reply_ || stream_ == nullptr) return;
  // (The end-of-turn id the reply drops is held until an id follows it: summary_body drops it at the end.)
  const std::span<const TokenId> body = codec_->summary_body(so_far.ids);
  if (body.size() <= decoded_) return;
  const std::string bytes = codec_->decode(body.subspan(decoded_));
  decoded_ = body.size();
  std::string reasoning, content;
  reply_->add(bytes, reasoning, content);
  if (reasoning.empty() && content.empty()) return;
  header_.cached_tokens = so_far.cached_tokens;
  // The reasoning is whole once the content shows: a writer that closes the reasoning's part then (the
  // Responses reasoning item's done events) finds it here.
  if (shown_.content == 0 && !content.empty()) header_.reply.reasoning = reply_->reasoning();
  std::string out;
  const bool reasoning_shown = events_(out, header_, shown_, reasoning, content);
  shown_.opened = true;
  if (reasoning_shown) shown_.reasoning += reasoning.size();
  shown_.content += content.size();
  stream_->send(out);
}

}  // namespace crl::server::gateway
