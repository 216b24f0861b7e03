// The gateway's upstream forwarding (server/gateway/upstream.h): a call runs on the thread that makes it
// (no io thread of its own to hand the call to and back: two scheduler wake-ups per call fewer), keep-alive
// connections are reused across calls and threads, and concurrent calls each get their own answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "engine/context.h"
#include "engine/token.h"
#include "server/gateway/upstream.h"
#include "tests/policies/llm/scripted_llm_server.h"

namespace crl::server::gateway {
namespace {

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

std::string echo(std::string_view prompt, uint64_t) {
  return "echo " + std::string(prompt.substr(0, 16));
}

TEST(GatewayUpstream, StartsNoThreadAndAnswersOnTheCallingThread) {
  crl::testing::ScriptedLlmOptions llm;
  llm.script = echo;
  crl::testing::ScriptedLlmServer stand_in(llm);
  UpstreamOptions options;
  options.base_url = stand_in.url();
  options.vocab_size = 259;
  const size_t before = thread_count();
  Upstream upstream(options);
  EXPECT_EQ(thread_count(), before) << "the upstream must not hand calls to a thread of its own";
  TokenArena arena;
  const std::vector<TokenId> ids = {'h', 'i', ' ', 'x'};
  const PromptView prompt(&arena, {arena.append(ids, Provenance::kPrompt)});
  size_t after_first = 0;
  for (int k = 0; k < 20; ++k) {
    UpstreamCall call;
    call.prompt = &prompt;
    call.max_new_tokens = 64;
    call.sampling_seed = static_cast<uint64_t>(k);
    call.rid = "t/" + std::to_string(k);
    const UpstreamResult result = upstream.generate(call);
    ASSERT_TRUE(result.ok) << result.error;
    EXPECT_FALSE(result.answer.ids.empty());
    if (k == 0) after_first = thread_count();
  }
  // asio's resolver keeps one idle thread per lane after the first name lookup; calls add none.
  EXPECT_LE(after_first, before + 1);
  EXPECT_EQ(thread_count(), after_first);
  EXPECT_EQ(stand_in.connections(), 1u) << "sequential calls reuse one keep-alive connection";
}

TEST(GatewayUpstream, ConcurrentCallersGetTheirOwnAnswers) {
  crl::testing::ScriptedLlmOptions llm;
  llm.script = echo;
  crl::testing::ScriptedLlmServer stand_in(llm);
  UpstreamOptions options;
  options.base_url = stand_in.url();
  options.vocab_size = 259;
  Upstream upstream(options);
  constexpr int kThreads = 8, kCalls = 25;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      TokenArena arena;
      const std::string text = "thread" + std::to_string(t) + " says";
      const std::vector<TokenId> ids(text.begin(), text.end());
      const PromptView prompt(&arena, {arena.append(ids, Provenance::kPrompt)});
      for (int k = 0; k < kCalls; ++k) {
        UpstreamCall call;
        call.prompt = &prompt;
        call.max_new_tokens = 64;
        call.rid = std::to_string(t) + "/" + std::to_string(k);
        const UpstreamResult result = upstream.generate(call);
        std::string answer(result.answer.ids.begin(),
                           result.answer.ids.end() - (result.answer.ids.empty() ? 0 : 1));
        if (!result.ok || answer != "echo " + text.substr(0, 16)) ++wrong[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  EXPECT_LE(stand_in.connections(), static_cast<uint64_t>(kThreads));
}

}  // namespace
}  // namespace crl::server::gateway
