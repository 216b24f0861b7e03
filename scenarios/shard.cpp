#include "scenarios/shard.h"

#include <google/protobuf/text_format.h>

#include <filesystem>
#include <map>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/proto_bytes.h"
#include "engine/sha256.h"
#include "engine/trajectory_io.h"
#include "proto/shard.pb.h"
#include "scenarios/output_set.h"

namespace crl::scenarios {
namespace {

namespace fs = std::filesystem;
using proto::shard::JobRecord;
using proto::shard::ShardManifest;

constexpr const char* kFormat = "crl.shard";
constexpr uint32_t kVersion = 1;

std::string job_file(uint32_t job) {
  std::string digits = std::to_string(job);
  if (digits.size() < 6) digits.insert(0, 6 - digits.size(), '0');
  return "job-" + digits + ".pb";
}

std::string sha256_hex(const std::string& bytes) {
  return Sha256().update(bytes).hex_digest();
}

JobRecord to_record(uint32_t job, const std::string& arm, const SeedResult& r) {
  JobRecord out;
  out.set_job(job);
  out.set_arm(arm);
  out.set_seed(r.seed);
  out.set_accuracy(r.accuracy);
  out.set_episodes(r.episodes);
  out.set_eval_episodes(r.eval_episodes);
  for (const CurvePoint& p : r.curve) point_to_proto(p, out.add_curve());
  out.set_has_example(r.has_example);
  if (r.has_example) {
    for (size_t s = 0; s < r.example.segments.size(); ++s) *out.add_example() = to_proto(r.example, s);
  }
  for (double f : r.example_factors) out.add_example_factors(f);
  for (const TypeResult& t : r.types) type_to_proto(t, out.add_types());
  return out;
}

SeedResult from_record(const JobRecord& in, const std::string& where) {
  SeedResult r;
  r.seed = in.seed();
  r.accuracy = in.accuracy();
  r.episodes = in.episodes();
  r.eval_episodes = in.eval_episodes();
  for (const auto& p : in.curve()) r.curve.push_back(point_from_proto(p));
  r.has_example = in.has_example();
  if (r.has_example) {
    const std::vector<proto::Segment> segments(in.example().begin(), in.example().end());
    std::vector<Trajectory> example = from_proto(segments, where);
    if (example.size() != 1)
      throw Error(where, "example", "holds " + std::to_string(example.size()) + " trajectories, expected 1");
    r.example = std::move(example.front());
  }
  r.example_factors.assign(in.example_factors().begin(), in.example_factors().end());
  for (const auto& m : in.types()) r.types.push_back(type_from_proto(m));
  return r;
}

std::string arms_text(const ShardManifest& m) {
  if (m.arms().empty()) return "(every arm)";
  std::string out;
  for (const std::string& a : m.arms()) out += (out.empty() ? "" : ",") + a;
  return out;
}

std::string seeds_text(const ShardManifest& m) {
  std::string out;
  for (uint64_t s : m.seeds()) out += (out.empty() ? "" : ",") + std::to_string(s);
  return "[" + out + "]";
}

ShardManifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kShardManifest).string();
  if (fs::exists(fs::path(dir) / kIncompleteMarker)) {
    throw Error(dir, "",
                "shard folder holds the INCOMPLETE marker: its run was interrupted (run it again, "
                "with --resume to continue from its checkpoints)");
  }
  if (!fs::is_directory(dir))
    throw Error(dir, "", "is not a folder (expected a shard folder of crl run --shard)");
  if (!fs::exists(path))
    throw Error(dir, "",
                "holds no " + std::string(kShardManifest) + " (not a shard folder of crl run --shard I/N)");
  ShardManifest m;
  if (!google::protobuf::TextFormat::ParseFromString(read_file(path), &m) || m.format() != kFormat) {
    throw Error(path, "", "is not a shard manifest (format \"crl.shard\")");
  }
  if (m.version() != kVersion) {
    throw Error(path, "version",
                std::to_string(m.version()) + ", this build reads version " + std::to_string(kVersion));
  }
  if (m.shard_count() == 0 || m.shard_index() >= m.shard_count()) {
    throw Error(path, "shard_index",
                std::to_string(m.shard_index()) + "/" + std::to_string(m.shard_count()) +
                    " is not a shard I/N with 0 <= I < N");
  }
  return m;
}

}  // namespace

ShardId parse_shard(const std::string& text) {
  const auto bad = [&] {
    return Error("option --shard", "", "value " + quote(text) + " is not I/N with integers 0 <= I < N");
  };
  const size_t slash = text.find('/');
  if (slash == std::string::npos) throw bad();
  const auto number = [&](const std::string& part) {
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos)
      throw bad();
    return static_cast<uint32_t>(std::stoul(part));
  };
  ShardId id{number(text.substr(0, slash)), number(text.substr(slash + 1))};
  if (id.count == 0 || id.index >= id.count) throw bad();
  return id;
}

std::vector<uint32_t> shard_jobs(ShardId shard, size_t job_count) {
  std::vector<uint32_t> out;
  for (size_t i = shard.index; i < job_count; i += shard.count) out.push_back(static_cast<uint32_t>(i));
  return out;
}

std::string ShardCommand::with_out(const std::string& out_dir) const {
  std::string command = "crl run";
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (static_cast<int>(i) == out_arg) arg = arg.rfind("--out=", 0) == 0 ? "--out=" + out_dir : out_dir;
    command += " " + arg;
  }
  return command;
}

void write_shard(const std::string& dir, const std::string& scenario_path, const std::string& scenario_text,
                 const ScenarioSpec& spec, const std::vector<uint64_t>& seeds, ShardId shard,
                 const std::vector<JobResult>& jobs, const ShardCommand& command) {
  ShardManifest m;
  m.set_format(kFormat);
  m.set_version(kVersion);
  m.set_scenario_path(scenario_path);
  m.set_scenario_sha256(sha256_hex(scenario_text));
  m.set_scenario_text(scenario_text);
  m.set_scenario_name(spec.name);
  for (uint64_t s : seeds) m.add_seeds(s);
  for (const ArmSpec& arm : spec.arms) m.add_arms(arm.name);
  m.set_shard_index(shard.index);
  m.set_shard_count(shard.count);
  m.set_job_count(static_cast<uint32_t>(spec.arms.size() * seeds.size()));
  for (const std::string& arg : command.args) m.add_command_args(arg);
  m.set_out_arg(command.out_arg);
  std::vector<std::pair<std::string, std::string>> files;
  for (const JobResult& job : jobs) {
    const uint32_t index = static_cast<uint32_t>(job.arm * seeds.size() + job.seed_index);
    m.add_jobs(index);
    std::string bytes;
    bytes = deterministic_bytes(to_record(index, spec.arms[job.arm].name, job.result));
    files.emplace_back(job_file(index), std::move(bytes));
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(m, &text);
  files.emplace_back(kShardManifest, text);
  publish_files(dir, files);
}

MergedRun merge_shards(const std::vector<std::string>& dirs, const std::string& out_dir) {
  if (dirs.empty()) throw Error("crl merge", "", "no shard folders given (crl merge DIR/shard-* --out DIR)");
  std::vector<ShardManifest> manifests;
  std::map<uint32_t, size_t> by_index;  // shard index -> position in dirs
  for (size_t d = 0; d < dirs.size(); ++d) {
    manifests.push_back(read_manifest(dirs[d]));
    const ShardManifest& m = manifests.back();
    const ShardManifest& first = manifests.front();
    if (m.scenario_sha256() != first.scenario_sha256()) {
      throw Error(dirs[d], "",
                  "comes from scenario " + quote(m.scenario_path()) + " (SHA-256 " +
                      m.scenario_sha256().substr(0, 16) + "...), " + dirs[0] + " from " +
                      quote(first.scenario_path()) + " (SHA-256 " + first.scenario_sha256().substr(0, 16) +
                      "...): shards of other scenario bytes");
    }
    if (m.shard_count() != first.shard_count()) {
      throw Error(dirs[d], "",
                  "is shard " + std::to_string(m.shard_index()) + "/" + std::to_string(m.shard_count()) +
                      ", " + dirs[0] + " is of N = " + std::to_string(first.shard_count()) +
                      ": shards of another split");
    }
    if (arms_text(m) != arms_text(first)) {
      throw Error(dirs[d], "",
                  "ran arms " + arms_text(m) + ", " + dirs[0] + " ran arms " + arms_text(first) +
                      ": shards of other runs");
    }
    if (seeds_text(m) != seeds_text(first) || m.job_count() != first.job_count()) {
      throw Error(dirs[d], "",
                  "ran seeds " + seeds_text(m) + ", " + dirs[0] + " ran seeds " + seeds_text(first) +
                      ": shards of other runs");
    }
    const std::vector<uint32_t> expected = shard_jobs({m.shard_index(), m.shard_count()}, m.job_count());
    if (!std::equal(expected.begin(), expected.end(), m.jobs().begin(), m.jobs().end())) {
      throw Error(dirs[d], "jobs",
                  "are not the jobs of shard " + std::to_string(m.shard_index()) + "/" +
                      std::to_string(m.shard_count()) + " (job i belongs to shard i mod N)");
    }
    if (const auto [it, fresh] = by_index.emplace(m.shard_index(), d); !fresh) {
      throw Error(dirs[d], "",
                  "is shard " + std::to_string(m.shard_index()) + "/" + std::to_string(m.shard_count()) +
                      " again (also " + dirs[it->second] +
                      "): duplicate shard, its jobs would be counted twice");
    }
  }
  const ShardManifest& first = manifests.front();
  MergedRun out;
  const std::string& text = first.scenario_text();
  if (sha256_hex(text) != first.scenario_sha256()) {
    throw Error(dirs[0], "scenario_text", "does not match the manifest's SHA-256 (the manifest is damaged)");
  }
  out.spec = parse_scenario(text, first.scenario_path());
  if (first.arms_size() > 0) {
    out.spec = select_arms(out.spec, {first.arms().begin(), first.arms().end()}, dirs[0] + " arms");
  }
  const std::vector<uint64_t> seeds(first.seeds().begin(), first.seeds().end());
  if (out.spec.arms.size() * seeds.size() != first.job_count()) {
    throw Error(dirs[0], "job_count",
                std::to_string(first.job_count()) + " is not arms x seeds of the scenario");
  }
  const auto job_name = [&](uint32_t job) {
    return "job " + std::to_string(job) + " (arm " + quote(out.spec.arms[job / seeds.size()].name) +
           ", seed " + std::to_string(seeds[job % seeds.size()]) + ")";
  };
  for (uint32_t i = 0; i < first.shard_count(); ++i) {
    if (by_index.count(i)) continue;
    std::string missing;
    for (uint32_t job : shard_jobs({i, first.shard_count()}, first.job_count())) {
      missing += (missing.empty() ? "" : ", ") + job_name(job);
    }
    throw Error("crl merge", "",
                "shard " + std::to_string(i) + "/" + std::to_string(first.shard_count()) +
                    " is missing from the folders given" +
                    (missing.empty() ? std::string(" (it has no jobs)") : ": " + missing));
  }
  std::vector<JobResult> jobs;
  for (size_t d = 0; d < dirs.size(); ++d) {
    for (uint32_t job : manifests[d].jobs()) {
      const std::string path = (fs::path(dirs[d]) / job_file(job)).string();
      if (!fs::exists(path))
        throw Error(dirs[d], "", "lacks the record of " + job_name(job) + " (" + path + ")");
      JobRecord record;
      if (!record.ParseFromString(read_file(path)))
        throw Error(path, "", "is not a job record (" + job_name(job) + ")");
      const size_t arm = job / seeds.size(), seed = job % seeds.size();
      if (record.job() != job || record.arm() != out.spec.arms[arm].name || record.seed() != seeds[seed]) {
        throw Error(path, "",
                    "holds job " + std::to_string(record.job()) + " (arm " + quote(record.arm()) + ", seed " +
                        std::to_string(record.seed()) + "), expected " + job_name(job));
      }
      jobs.push_back(JobResult{arm, seed, from_record(record, path)});
    }
  }
  out.result = assemble_result(out.spec, seeds, std::move(jobs));
  ShardCommand command;
  command.args.assign(first.command_args().begin(), first.command_args().end());
  command.out_arg = first.out_arg();
  out.command = command.with_out(out_dir);
  return out;
}

}  // namespace crl::scenarios
