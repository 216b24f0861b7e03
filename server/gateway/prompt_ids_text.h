#pragma once
// The JSON text of a session's prompt ids ("[1,2,3]"), kept between its upstream calls so that each call
// writes only the ids appended since the previous one (issue 18's benchmark: writing the 8k ids of an
// 8k-token context from scratch cost about 80 us per call, more than everything else the gateway does).
//
// Why reuse is exact: a prompt is a list of spans over its context's append-only token arena
// (engine/token.h), and between two execution turns the window only grows: the next prompt's span list
// starts with the previous one's, span for span (the turn header span is shared, engine/context.cpp). So when
// the new span list starts with the cached one, same `generation`, the cached text is the text of the new
// prompt's first tokens and only the rest is written: spans are offsets, and within one generation the
// arena only grows (it is truncated only when an episode starts, before its first prompt), so a reallocation
// of its storage moves no offset. Anything else (a compaction rebuilt the window, a summary request, a new
// episode after a history edit) writes the text whole and caches that. `generation` must change whenever the
// arena may have forgotten tokens or been replaced (a new episode); the session bumps it in make_episode,
// and a change in the compaction count also drops the cache.
//
// Memory: the text of one prompt per session (about 5 bytes per token).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/context.h"

namespace crl::server::gateway {

class PromptIdsText {
 public:
  // The text of `prompt`'s ids, byte for byte what policies/llm's write_request writes for it; valid until
  // the next call. `generation` names the arena's life (see above), `compactions` the window's.
  std::string_view text(const PromptView& prompt, uint64_t generation, int compactions);
  void invalidate() { cached_ = false; }
  // Ids written by the last text() call (the appended ones when it reused the cache, all otherwise).
  size_t last_written() const { return last_written_; }

 private:
  bool cached_ = false;
  uint64_t generation_ = 0;
  int compactions_ = 0;
  std::vector<Span> spans_;  // of the cached prompt
  size_t ids_ = 0;           // ids in text_
  std::string text_;         // "[...]" of the cached prompt
  size_t last_written_ = 0;
};

}  // namespace crl::server::gateway
