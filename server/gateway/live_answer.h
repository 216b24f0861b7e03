#pragma once
// A streamed call's answer sent to the harness as the upstream samples it.
//
// When a harness asks for a stream, the upstream call streams too (upstream.h UpstreamCall::sampled: SGLang's
// events or the OpenAI API's chunks), and each batch of ids the upstream sends is decoded here and read by
// LiveReply (live_reply.h), and what it shows goes out at once as the API's events (the head first, through
// the call's StreamKeepalive, which then also ends a stream that fails with the API's error event). When the
// answer is whole, the call's stream writer sends the rest (openai_answer.h StreamShown): the texts' rest,
// the tool calls, the finish. So the harness reads the first words while the rest is sampled, and what it
// joins is byte for byte the message it would have read at once. Only the turn's own upstream call streams
// (a summary request the trigger sends first is never shown), a stored answer (a retry) is sent whole, and
// an answer that fails after its first events ends with the error event; nothing is recorded for it, so the
// harness's retry samples again.
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "envs/codec.h"
#include "server/gateway/gateway_session.h"
#include "server/gateway/live_reply.h"
#include "server/gateway/stream_shown.h"
#include "server/gateway/upstream.h"

namespace crl::server::gateway {

class StreamKeepalive;

class LiveAnswer final : public SampledTokens {
 public:
  // The API's events for what is shown, appended to `out`: the reasoning's and the content's new text (either
  // may be empty). `shown` is what went out before them (nothing: the stream's opening events come first);
  // a writer that numbers its events keeps their count there (StreamShown::events). `header` is the
  // answer's id and time, and the counts the upstream gave so far (cached_tokens). Returns whether the
  // reasoning is shown (an Anthropic call without thinking does not show it).
  using Events = std::function<bool(std::string& out, const Completion& header, StreamShown& shown,
                                    std::string_view reasoning, std::string_view content)>;
  // `stream`: the call's (null: the answer is never sent live).
  LiveAnswer(StreamKeepalive* stream, Events events) : stream_(stream), events_(std::move(events)) {}

  // The session, before the turn's upstream call: the answer's id and time (the completion's too), what
  // decodes its ids (the thread's codec, which outlives the call), and how its text is read.
  void start(const Completion& header, const Codec& codec, LiveRules rules);
  // The upstream's ids so far (SampledTokens): the new ones decoded, and what can be shown sent.
  void sampled(const llm::GenerateResult& so_far) override;
  // What went out, for the rest of the stream.
  const StreamShown& shown() const { return shown_; }

 private:
  StreamKeepalive* stream_;
  Events events_;
  Completion header_;
  const Codec* codec_ = nullptr;
  std::optional<LiveReply> reply_;
  size_t decoded_ = 0;  // ids decoded so far
  StreamShown shown_;
};

}  // namespace crl::server::gateway
