// Rollout mode (POST /v1/rollouts, issue 7): the service drives the scripted LLM server of
// tests/policies/llm itself and answers every episode's status and export; JSON and binary protobuf carry
// the same answer; failed LLM requests fail their episode only; bad requests get typed errors naming the
// field.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <numeric>

#include "server/episode_service.h"
#include "server/router.h"
#include "tests/policies/llm/scripted_llm_server.h"
#include "wire/api_error.h"
#include "wire/wire_codec.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote
namespace {

using google::protobuf::util::MessageDifferencer;

proto::RolloutsRequest synthetic_rollouts(const std::string& llm_url, int episodes, uint64_t seed = 7) {
  proto::RolloutsRequest r;
  for (int i = 0; i < episodes; ++i) {
    proto::CreateEpisodeRequest* e = r.add_episodes();
    e->set_env("synthetic");
    e->set_split("dev");
    e->set_index(static_cast<uint32_t>(i));
    e->set_seed(seed);
    e->set_group_index(i);
    e->mutable_budget()->set_capacity(3072);
    e->mutable_budget()->set_reserve(1024);
    e->mutable_budget()->set_summary_cap(256);
  }
  r.mutable_llm()->set_base_url(llm_url);
  return r;
}

TEST(Rollouts, RunWholeEpisodesAgainstTheLlmServer) {
  crl::testing::ScriptedLlmServer llm;
  EpisodeService service(ServiceOptions{});
  const proto::RolloutsResponse out = service.rollouts(synthetic_rollouts(llm.url(), 4));
  ASSERT_EQ(out.rollouts_size(), 4);
  EXPECT_EQ(out.requests(), llm.calls().size());
  EXPECT_EQ(out.failed_requests(), 0u);
  for (int i = 0; i < 4; ++i) {
    const proto::RolloutResult& r = out.rollouts(i);
    EXPECT_EQ(r.task_id(), "dev-" + std::to_string(i));
    EXPECT_EQ(r.status(), "completed") << r.reason();
    EXPECT_EQ(r.reward(), 1.0);
    EXPECT_GT(r.compactions(), 0);
    EXPECT_EQ(r.group_index(), i);
    ASSERT_GT(r.segments_size(), 2);
    for (int s = 0; s < r.segments_size(); ++s) {
      const proto::Segment& segment = r.segments(s);
      EXPECT_EQ(segment.segment_index(), static_cast<uint32_t>(s));
      EXPECT_EQ(segment.rollout_id(), r.rollout_id());
      EXPECT_EQ(segment.reward(), 1.0);
      EXPECT_EQ(segment.metadata().at("tokenizer"), "byte");
    }
  }
  // Same request, same answer (the LLM seeds derive from the stream keys; the scripted model is
  // deterministic), whatever max_in_flight.
  proto::RolloutsRequest again = synthetic_rollouts(llm.url(), 4);
  again.mutable_llm()->set_max_in_flight(1);
  const proto::RolloutsResponse second = service.rollouts(again);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(second.rollouts(i).state_hash(), out.rollouts(i).state_hash());
    EXPECT_TRUE(MessageDifferencer::Equals(second.rollouts(i), out.rollouts(i)));
  }
}

// GET /metrics (issue 19 item 4): rollout mode counts its LLM calls, tokens, latencies and compactions.
TEST(Rollouts, CountedInTheMetrics) {
  crl::testing::ScriptedLlmServer llm;
  EpisodeService service(ServiceOptions{});
  const proto::RolloutsResponse out = service.rollouts(synthetic_rollouts(llm.url(), 3));
  ASSERT_EQ(out.rollouts_size(), 3);
  const ServerMetrics& m = service.metrics();
  EXPECT_EQ(m.rollout_episodes->value(), 3u);
  EXPECT_EQ(m.llm_calls->value(), out.requests());
  EXPECT_EQ(m.llm_failed_calls->value(), 0u);
  EXPECT_EQ(m.llm_tokens_sent->value(), out.tokens_sent());
  EXPECT_EQ(m.llm_tokens_received->value(), out.tokens_received());
  uint64_t compactions = 0;
  for (const auto& r : out.rollouts()) compactions += static_cast<uint64_t>(r.compactions());
  EXPECT_GT(compactions, 0u);
  EXPECT_EQ(m.compactions->value(), compactions);
  const std::vector<uint64_t> buckets = m.llm_call_seconds->bucket_counts();
  EXPECT_EQ(std::accumulate(buckets.begin(), buckets.end(), uint64_t{0}), out.requests());
  // The scripted server reports half of each prompt as cached (SGLang meta_info.cached_tokens).
  EXPECT_GT(m.llm_cached_tokens->value(), 0u);
  EXPECT_LE(m.llm_cached_tokens->value(), out.tokens_sent() / 2);
  EXPECT_GE(m.llm_cached_tokens->value(), (out.tokens_sent() - out.requests()) / 2);
}

TEST(Rollouts, JsonAndProtobufOverTheRouterGiveTheSameAnswer) {
  crl::testing::ScriptedLlmServer llm;
  EpisodeService service(ServiceOptions{});
  const proto::RolloutsRequest request = synthetic_rollouts(llm.url(), 2);
  const std::string json_body = encode_message(request, WireFormat::kJson);
  const HttpAnswer json = route(service, HttpCall{"POST", "/v1/rollouts", "application/json", "", json_body});
  ASSERT_EQ(json.status, 200) << json.body;
  const std::string binary_body = encode_message(request, WireFormat::kProtobuf);
  const HttpAnswer binary =
      route(service, HttpCall{"POST", "/v1/rollouts", "application/x-protobuf", "", binary_body});
  ASSERT_EQ(binary.status, 200);
  proto::RolloutsResponse a, b;
  decode_message(json.body, WireFormat::kJson, a);
  decode_message(binary.body, WireFormat::kProtobuf, b);
  ASSERT_EQ(a.rollouts_size(), 2);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(MessageDifferencer::Equals(a.rollouts(i), b.rollouts(i)));
  const HttpAnswer get = route(service, HttpCall{"GET", "/v1/rollouts", "", "", ""});
  EXPECT_EQ(get.status, 405);
}

TEST(Rollouts, FailedLlmRequestsFailTheirEpisodeOnly) {
  crl::testing::ScriptedLlmOptions options;
  options.faults.sticky_every = 40;
  options.faults.sticky_fault = "malformed";
  crl::testing::ScriptedLlmServer llm(options);
  EpisodeService service(ServiceOptions{});
  const proto::RolloutsResponse out = service.rollouts(synthetic_rollouts(llm.url(), 6));
  int failed = 0, completed = 0;
  for (const proto::RolloutResult& r : out.rollouts()) {
    if (r.status() == "failed") {
      ++failed;
      EXPECT_NE(r.reason().find("malformed LLM answer"), std::string::npos) << r.reason();
    } else {
      EXPECT_EQ(r.status(), "completed");
      ++completed;
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(completed, 0);
  EXPECT_EQ(out.failed_requests(), static_cast<uint32_t>(failed));
}

TEST(Rollouts, BadRequestsNameTheField) {
  EpisodeService service(ServiceOptions{});
  const auto field_of = [&](const proto::RolloutsRequest& r) {
    try {
      service.rollouts(r);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.http_status(), 400);
      return e.field();
    }
    return std::string("(no error)");
  };
  proto::RolloutsRequest r = synthetic_rollouts("http://127.0.0.1:1", 1);
  r.mutable_llm()->set_api("vllm");
  EXPECT_EQ(field_of(r), "llm.api");
  r = synthetic_rollouts("", 1);
  EXPECT_EQ(field_of(r), "llm.base_url");
  r = synthetic_rollouts("https://x", 1);
  EXPECT_EQ(field_of(r), "llm.base_url");
  r = synthetic_rollouts("http://127.0.0.1:1", 0);
  EXPECT_EQ(field_of(r), "episodes");
  r = synthetic_rollouts("http://127.0.0.1:1", 2);
  r.mutable_episodes(1)->set_env("nope");
  EXPECT_EQ(field_of(r), "episodes[1].env");
  r = synthetic_rollouts("http://127.0.0.1:1", 1);
  r.mutable_episodes(0)->set_view("symbolic");
  EXPECT_EQ(field_of(r), "episodes[0].view");
}

}  // namespace
}  // namespace crl::server
