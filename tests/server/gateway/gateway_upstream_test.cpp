// The gateway's upstream forwarding (server/gateway/upstream.h): a call runs on the thread that makes it
// (no io thread of its own to hand the call to and back: two scheduler wake-ups per call fewer), keep-alive
// connections are reused across calls and threads, concurrent calls each get their own answer, and the
// blocking exchange keeps the HTTP client's retry, deadline and cancel semantics.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
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
  // A numeric address needs no lookup thread (host_lookup.h), and calls start none. (At most `before`: a
  // detached lookup thread of an earlier test in this binary may end meanwhile.)
  EXPECT_LE(after_first, before);
  EXPECT_LE(thread_count(), after_first);
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

// The blocking exchange keeps llm::HttpClient's semantics (policies/llm/http_client.h): retries with
// backoff on 5xx and dropped connections only, 4xx final, connection refused, a stale keep-alive connection
// retried once at once, cancel() final.
struct OneCall {
  TokenArena arena;
  std::vector<TokenId> ids = {'h', 'i'};
  PromptView prompt{&arena, {arena.append(ids, Provenance::kPrompt)}};
  UpstreamResult run(Upstream& upstream, uint64_t seed = 1) {
    UpstreamCall call;
    call.prompt = &prompt;
    call.max_new_tokens = 32;
    call.sampling_seed = seed;
    call.rid = "t/" + std::to_string(seed);
    call.routing_key = "route-me";
    return upstream.generate(call);
  }
};

UpstreamOptions options_for(const crl::testing::ScriptedLlmServer& stand_in, int retries) {
  UpstreamOptions options;
  options.base_url = stand_in.url();
  options.vocab_size = 259;
  options.max_retries = retries;
  options.backoff_s = 0.001;
  options.request_timeout_s = 30;
  return options;
}

TEST(GatewayUpstream, RetriesServerErrorsAndDroppedConnections) {
  for (const bool drop : {false, true}) {
    crl::testing::ScriptedLlmOptions llm;
    llm.script = echo;
    (drop ? llm.faults.transient_drops : llm.faults.transient_5xx) = 2;
    crl::testing::ScriptedLlmServer stand_in(llm);
    Upstream upstream(options_for(stand_in, 2));
    OneCall one;
    const UpstreamResult result = one.run(upstream);
    EXPECT_TRUE(result.ok) << result.error;
    EXPECT_EQ(stand_in.attempts(), 3u) << (drop ? "drops" : "5xx");
    const auto calls = stand_in.calls();
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].routing_key, "route-me");
    EXPECT_EQ(calls[0].prompt, one.ids);
  }
}

TEST(GatewayUpstream, GivesUpAfterTheRetriesAndNeverRetriesClientErrors) {
  for (const std::string fault : {"5xx", "400", "drop"}) {
    crl::testing::ScriptedLlmOptions llm;
    llm.script = echo;
    llm.faults.sticky_every = 1;
    llm.faults.sticky_fault = fault;
    crl::testing::ScriptedLlmServer stand_in(llm);
    Upstream upstream(options_for(stand_in, 2));
    OneCall one;
    const UpstreamResult result = one.run(upstream);
    EXPECT_FALSE(result.ok);
    if (fault == "400") {
      EXPECT_EQ(stand_in.attempts(), 1u);
      EXPECT_EQ(result.status, 502);
      EXPECT_EQ(result.code, "upstream_error");
      EXPECT_EQ(result.retry_after, 0);
    } else {
      EXPECT_EQ(stand_in.attempts(), 3u) << fault;
      EXPECT_EQ(result.status, fault == "5xx" ? 502 : 503) << result.error;
      EXPECT_EQ(result.code, fault == "5xx" ? "upstream_error" : "upstream_unavailable");
      EXPECT_EQ(result.retry_after, 1);
    }
  }
}

// An answer names the prompt the server ran: its length (SGLang's meta_info.prompt_tokens, the OpenAI API's
// usage.prompt_tokens) and, from vLLM, its ids (prompt_token_ids, return_token_ids). One that is not the
// prompt sent (a server that cut it from the left, as SGLang's --allow-auto-truncate and vLLM's
// truncate_prompt_tokens do) fails the call, never retried: the session would record a prompt the policy did
// not see. The stand-in names the prompt on every other call of these tests, so each of them checks it too.
TEST(GatewayUpstream, AnUpstreamThatRanAnotherPromptFailsTheCall) {
  for (const llm::ApiKind api : {llm::ApiKind::kSglang, llm::ApiKind::kOpenAi}) {
    for (const bool truncate : {false, true}) {
      crl::testing::ScriptedLlmOptions llm;
      llm.script = echo;
      if (truncate) {
        llm.faults.sticky_every = 1;
        llm.faults.sticky_fault = "truncate";
      }
      crl::testing::ScriptedLlmServer stand_in(llm);
      UpstreamOptions options = options_for(stand_in, 2);
      options.api = api;
      Upstream upstream(options);
      OneCall one;
      const UpstreamResult result = one.run(upstream);
      EXPECT_EQ(stand_in.attempts(), 1u);
      if (!truncate) {
        EXPECT_TRUE(result.ok) << result.error;
        continue;
      }
      EXPECT_FALSE(result.ok);
      EXPECT_EQ(result.status, 502);
      EXPECT_EQ(result.code, "upstream_malformed");
      EXPECT_EQ(result.retry_after, 0);
      EXPECT_EQ(result.error,
                api == llm::ApiKind::kSglang
                    ? "the LLM server's answer is malformed: meta_info.prompt_tokens is 1 where "
                      "the prompt sent had 2 ids (the server did not run the prompt it was sent)"
                    : "the LLM server's answer is malformed: choices[0].prompt_token_ids has 1 id "
                      "where the prompt sent had 2 (the server did not run the prompt it was sent)");
    }
  }
}

TEST(GatewayUpstream, ConnectionRefusedIsUnavailable) {
  uint16_t port = 0;
  {
    crl::testing::ScriptedLlmServer gone;  // a port nobody listens on once it is destroyed
    port = gone.port();
  }
  UpstreamOptions options;
  options.base_url = "http://127.0.0.1:" + std::to_string(port);
  options.max_retries = 1;
  options.backoff_s = 0.001;
  Upstream upstream(options);
  OneCall one;
  const UpstreamResult result = one.run(upstream);
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.status, 503);
  EXPECT_EQ(result.code, "upstream_unavailable");
}

// The upstream restarted between two calls: the lane's kept connection is dead; the call is sent again at
// once on a fresh connection (no retry counted: max_retries 0) and answered.
TEST(GatewayUpstream, AStaleKeepAliveConnectionIsRetriedOnAFreshOne) {
  crl::testing::ScriptedLlmOptions llm;
  llm.script = echo;
  auto first = std::make_unique<crl::testing::ScriptedLlmServer>(llm);
  UpstreamOptions options = options_for(*first, 0);
  Upstream upstream(options);
  OneCall one;
  ASSERT_TRUE(one.run(upstream, 1).ok);
  llm.port = first->port();
  first.reset();
  crl::testing::ScriptedLlmServer second(llm);
  const UpstreamResult result = one.run(upstream, 2);
  EXPECT_TRUE(result.ok) << result.error;
  EXPECT_EQ(second.connections(), 1u);
  EXPECT_EQ(second.calls().size(), 1u);
}

// cancel() (the server's drain deadline) ends a call waiting on a silent upstream, and every later call.
TEST(GatewayUpstream, CancelEndsTheCallInFlightAndLaterOnes) {
  crl::testing::ScriptedLlmOptions llm;
  llm.script = echo;
  llm.faults.sticky_every = 1;
  llm.faults.sticky_fault = "hang";
  llm.faults.hang_s = 60;
  crl::testing::ScriptedLlmServer stand_in(llm);
  Upstream upstream(options_for(stand_in, 2));
  UpstreamResult result;
  std::thread caller([&] {
    OneCall one;
    result = one.run(upstream);
  });
  for (int i = 0; i < 2000 && stand_in.attempts() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(stand_in.attempts(), 1u);
  upstream.cancel();
  caller.join();
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.code, "upstream_unavailable");
  EXPECT_NE(result.error.find("cancelled"), std::string::npos) << result.error;
  OneCall later;
  const UpstreamResult after = later.run(upstream);
  EXPECT_EQ(after.code, "upstream_unavailable");
  EXPECT_EQ(stand_in.attempts(), 1u) << "nothing is sent after cancel()";
}

}  // namespace
}  // namespace crl::server::gateway
