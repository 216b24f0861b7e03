// The wire codec's JSON writer (wire/wire_codec.h) on what trainers fetch most: a session's export, beside
// protobuf's own JSON printer (util/json_util.h) and the binary encoding of the same message, same run.
//
//   BM_ExportEncode/Ours       encode_message(..., kJson): our reflection-driven writer
//   BM_ExportEncode/Protobuf   google::protobuf::util::MessageToJsonString with the same options (every
//   field,
//                              .proto names): the baseline
//   BM_ExportEncode/Binary     encode_message(..., kProtobuf): deterministic binary bytes
//
// The message: one ExportResponse of two segments shaped like a gateway session's at 8k-token contexts (8,000
// prompt ids with their provenance, 1,200 response ids with masks, log-probs, values and provenance, eight
// metadata entries). Counters: bytes (the encoding's size), elements_per_s (repeated values written per
// second).
#include <benchmark/benchmark.h>
#include <google/protobuf/util/json_util.h>

#include <random>
#include <string>

#include "engine/heap.h"
#include "proto/server.pb.h"
#include "wire/wire_codec.h"

namespace {

using namespace crl;

proto::ExportResponse export_of_two_segments() {
  std::mt19937 random(7);
  std::uniform_int_distribution<int> token(0, 151000);
  std::uniform_real_distribution<float> log_prob(-6.0f, 0.0f);
  proto::ExportResponse response;
  response.set_episode_id("gateway/bench-session");
  for (int s = 0; s < 2; ++s) {
    proto::Segment* segment = response.add_segments();
    segment->set_rollout_id("gateway/bench-session");
    segment->set_segment_index(s);
    segment->set_num_segments(2);
    segment->set_kind(s == 0 ? "execution" : "summary");
    for (int i = 0; i < 8000; ++i) {
      segment->add_prompt_ids(token(random));
      segment->add_prompt_provenance(i < 7000 ? proto::PROMPT : proto::ENVIRONMENT);
    }
    for (int i = 0; i < 1200; ++i) {
      const bool sampled = i % 3 != 0;
      segment->add_response_ids(token(random));
      segment->add_loss_mask(sampled ? 1 : 0);
      segment->add_critic_mask(sampled ? 1 : 0);
      segment->add_rollout_log_probs(sampled ? log_prob(random) : 0.0f);
      segment->add_values(0.0f);
      segment->add_response_provenance(sampled ? proto::SAMPLED : proto::ENVIRONMENT);
    }
    segment->set_reward(1.0);
    segment->set_status("completed");
    segment->set_finish_reason("stop");
    segment->set_task_id("gateway/bench-session");
    segment->set_env("gateway");
    segment->set_n_sampled(800);
    segment->set_n_after(s == 0 ? 800 : 0);
    segment->set_response_text(std::string(3000, 'x'));
    for (int m = 0; m < 8; ++m) (*segment->mutable_metadata())["key_" + std::to_string(m)] = "value";
  }
  return response;
}

int64_t repeated_values(const proto::ExportResponse& response) {
  int64_t n = 0;
  for (const proto::Segment& s : response.segments()) {
    n += s.prompt_ids_size() + s.prompt_provenance_size() + s.response_ids_size() + s.loss_mask_size() +
         s.critic_mask_size() + s.rollout_log_probs_size() + s.values_size() + s.response_provenance_size();
  }
  return n;
}

enum class Encoder { kOurs, kProtobuf, kBinary };

void BM_ExportEncode(benchmark::State& state, Encoder encoder) {
  keep_freed_memory();  // the heap as `crl serve` tunes it (cli/serve_command.cpp)
  merge_small_blocks_on_free();
  const proto::ExportResponse response = export_of_two_segments();
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  size_t bytes = 0;
  for (auto _ : state) {
    std::string out;
    switch (encoder) {
      case Encoder::kOurs:
        out = wire::encode_message(response, wire::WireFormat::kJson);
        break;
      case Encoder::kProtobuf:
        if (!google::protobuf::util::MessageToJsonString(response, &out, options).ok()) {
          state.SkipWithError("protobuf's printer failed");
          return;
        }
        break;
      case Encoder::kBinary:
        out = wire::encode_message(response, wire::WireFormat::kProtobuf);
        break;
    }
    bytes = out.size();
    benchmark::DoNotOptimize(out);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["elements_per_s"] = benchmark::Counter(
      static_cast<double>(repeated_values(response) * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_ExportEncode, Ours, Encoder::kOurs)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ExportEncode, Protobuf, Encoder::kProtobuf)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ExportEncode, Binary, Encoder::kBinary)->Unit(benchmark::kMicrosecond);

}  // namespace
