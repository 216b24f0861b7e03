#include "engine/trajectory_io.h"

#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/json_reader.h"
#include "engine/proto_bytes.h"
#include "engine/utf8.h"

namespace crl {

namespace {

EpisodeStatus parse_status(const std::string& text, const std::string& where) {
  for (auto status : {EpisodeStatus::kCompleted, EpisodeStatus::kTruncated, EpisodeStatus::kAborted,
                      EpisodeStatus::kFailed}) {
    if (episode_status_name(status) == text) return status;
  }
  throw Error(where, "status",
              "value " + quote(text) + " is not one of completed, truncated, aborted, failed");
}

SegmentKind parse_kind(const std::string& text, const std::string& where) {
  if (text == "execution") return SegmentKind::kExecution;
  if (text == "summary") return SegmentKind::kSummary;
  throw Error(where, "kind", "value " + quote(text) + " is not one of execution, summary");
}

Provenance parse_provenance(int value, const std::string& where, const char* field) {
  if (value < 0 || value > static_cast<int>(Provenance::kForced)) {
    throw Error(where, field, "value " + std::to_string(value) + " is not a provenance");
  }
  return static_cast<Provenance>(value);
}

}  // namespace

proto::Segment to_proto(const Trajectory& t, size_t s) {
  const Segment& segment = t.segments.at(s);
  proto::Segment out;
  out.set_rollout_id(t.rollout_id);
  out.set_segment_index(static_cast<uint32_t>(s));
  out.set_num_segments(static_cast<uint32_t>(t.segments.size()));
  out.set_kind(std::string(segment_kind_name(segment.kind)));
  out.mutable_prompt_ids()->Add(segment.prompt_ids.begin(), segment.prompt_ids.end());
  out.mutable_response_ids()->Add(segment.response_ids.begin(), segment.response_ids.end());
  out.mutable_loss_mask()->Add(segment.actor_mask.begin(), segment.actor_mask.end());
  out.mutable_critic_mask()->Add(segment.critic_mask.begin(), segment.critic_mask.end());
  out.mutable_rollout_log_probs()->Add(segment.logprobs.begin(), segment.logprobs.end());
  out.mutable_values()->Add(segment.values.begin(), segment.values.end());
  out.set_reward(t.reward);
  out.set_status(std::string(episode_status_name(t.status)));
  out.set_finish_reason(segment.finish_reason);
  out.set_group_index(t.group_index);
  out.set_sample_index(t.sample_index);
  out.set_task_id(t.task_id);
  out.set_env(t.env);
  out.set_n_sampled(static_cast<uint32_t>(segment.n_sampled));
  out.set_n_after(static_cast<uint64_t>(segment.n_after));
  out.set_compaction_index(static_cast<uint32_t>(segment.compaction_index));
  for (Provenance p : segment.prompt_provenance) out.add_prompt_provenance(static_cast<proto::Provenance>(p));
  for (Provenance p : segment.response_provenance)
    out.add_response_provenance(static_cast<proto::Provenance>(p));
  // Protobuf string fields must be valid UTF-8 (a binary file with an ill-formed one cannot be read back):
  // text decoded from sampled bytes, a failure's reason and metadata are repaired (engine/utf8.h).
  out.set_response_text(valid_utf8(segment.text));
  auto& metadata = *out.mutable_metadata();
  for (const auto& [key, value] : t.metadata) metadata[valid_utf8(key)] = valid_utf8(value);
  metadata["seed"] = std::to_string(t.seed);
  metadata["compactions"] = std::to_string(t.compactions);
  metadata["dropped_segments"] = std::to_string(t.dropped_segments);
  if (!t.reason.empty()) metadata["reason"] = valid_utf8(t.reason);
  return out;
}

std::vector<Trajectory> from_proto(const std::vector<proto::Segment>& records, const std::string& where) {
  std::vector<Trajectory> out;
  for (size_t r = 0; r < records.size(); ++r) {
    const proto::Segment& in = records[r];
    const std::string at = where + ": record " + std::to_string(r + 1);
    if (out.empty() || out.back().rollout_id != in.rollout_id() ||
        out.back().segments.size() == static_cast<size_t>(in.num_segments())) {
      Trajectory t;
      t.rollout_id = in.rollout_id();
      t.env = in.env();
      t.task_id = in.task_id();
      t.group_index = in.group_index();
      t.sample_index = in.sample_index();
      t.reward = in.reward();
      t.status = parse_status(in.status(), at);
      for (const auto& [key, value] : in.metadata()) {
        if (key == "seed") {
          t.seed = std::stoull(value);
        } else if (key == "compactions") {
          t.compactions = std::stoi(value);
        } else if (key == "dropped_segments") {
          t.dropped_segments = std::stoi(value);
        } else if (key == "reason") {
          t.reason = value;
        } else {
          t.metadata[key] = value;
        }
      }
      out.push_back(std::move(t));
    }
    Trajectory& t = out.back();
    if (in.segment_index() != t.segments.size()) {
      throw Error(at, "segment_index",
                  "value " + std::to_string(in.segment_index()) + " but " +
                      std::to_string(t.segments.size()) +
                      " was expected (segments of a rollout must be contiguous)");
    }
    if (in.reward() != t.reward) throw Error(at, "reward", "differs between segments of the same rollout");
    Segment s;
    s.kind = parse_kind(in.kind(), at);
    s.prompt_ids.assign(in.prompt_ids().begin(), in.prompt_ids().end());
    s.response_ids.assign(in.response_ids().begin(), in.response_ids().end());
    for (int m : in.loss_mask()) s.actor_mask.push_back(static_cast<uint8_t>(m));
    for (int m : in.critic_mask()) s.critic_mask.push_back(static_cast<uint8_t>(m));
    s.logprobs.assign(in.rollout_log_probs().begin(), in.rollout_log_probs().end());
    s.values.assign(in.values().begin(), in.values().end());
    for (int p : in.prompt_provenance())
      s.prompt_provenance.push_back(parse_provenance(p, at, "prompt_provenance"));
    for (int p : in.response_provenance()) {
      s.response_provenance.push_back(parse_provenance(p, at, "response_provenance"));
    }
    // Older or foreign exports may omit provenance: derive it from the masks.
    if (s.prompt_provenance.empty()) s.prompt_provenance.assign(s.prompt_ids.size(), Provenance::kPrompt);
    if (s.response_provenance.empty()) {
      for (uint8_t m : s.actor_mask)
        s.response_provenance.push_back(m ? Provenance::kSampled : Provenance::kEnvironment);
    }
    if (s.logprobs.empty()) s.logprobs.assign(s.response_ids.size(), 0.0f);
    if (s.values.empty()) s.values.assign(s.response_ids.size(), 0.0f);
    if (s.critic_mask.empty()) s.critic_mask = s.actor_mask;
    s.n_sampled = in.n_sampled();
    s.n_after = static_cast<int64_t>(in.n_after());
    s.compaction_index = static_cast<int>(in.compaction_index());
    s.finish_reason = in.finish_reason();
    s.text = in.response_text();
    t.segments.push_back(std::move(s));
  }
  for (const Trajectory& t : out) {
    try {
      t.validate();
    } catch (const Error& e) {
      throw Error(where, e.field(), e.where() + ": " + e.message());
    }
  }
  return out;
}

std::string to_jsonl(const std::vector<Trajectory>& trajectories) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  for (const Trajectory& t : trajectories) {
    for (size_t s = 0; s < t.segments.size(); ++s) {
      std::string line;
      const auto status = google::protobuf::util::MessageToJsonString(to_proto(t, s), &line, options);
      CRL_CHECK(status.ok(), "JSON export failed: " << status.ToString());
      // Protobuf prints map entries in hash order; re-emitting through nlohmann::json (whose objects are
      // sorted maps) makes every line byte-stable, keys sorted.
      out += read_json(line, "trajectory export").dump();
      out += '\n';
    }
  }
  return out;
}

std::string to_binary(const std::vector<Trajectory>& trajectories) {
  proto::TrajectoryFile file;
  for (const Trajectory& t : trajectories) {
    for (size_t s = 0; s < t.segments.size(); ++s) *file.add_segments() = to_proto(t, s);
  }
  return deterministic_bytes(file);
}

std::vector<Trajectory> read_trajectories(const std::string& path) {
  const std::string content = read_file(path);
  std::vector<proto::Segment> records;
  const size_t first = content.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && content[first] == '{') {
    size_t begin = 0;
    int line_number = 0;
    while (begin < content.size()) {
      size_t end = content.find('\n', begin);
      if (end == std::string::npos) end = content.size();
      ++line_number;
      const std::string line = content.substr(begin, end - begin);
      begin = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      proto::Segment segment;
      // The shared reader first: protobuf's parser takes a repeated key silently (the last one wins).
      read_json(line, path + ":" + std::to_string(line_number));
      const auto status = google::protobuf::util::JsonStringToMessage(line, &segment);
      if (!status.ok()) {
        throw Error(path + ":" + std::to_string(line_number), "",
                    "not a segment record: " + status.ToString());
      }
      records.push_back(std::move(segment));
    }
  } else {
    proto::TrajectoryFile file;
    if (!file.ParseFromString(content)) {
      throw Error(path, "", "neither JSONL segment records nor a binary TrajectoryFile");
    }
    records.assign(file.segments().begin(), file.segments().end());
  }
  return from_proto(records, path);
}

void write_trajectories(const std::string& path, const std::vector<Trajectory>& trajectories) {
  const bool jsonl = path.size() >= 6 && path.substr(path.size() - 6) == ".jsonl";
  write_file_atomic(path, jsonl ? to_jsonl(trajectories) : to_binary(trajectories));
}

}  // namespace crl
