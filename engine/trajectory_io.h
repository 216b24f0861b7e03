#pragma once
// Export and import of trajectories: protobuf (proto/trajectory.proto) and JSONL (one Segment per line,
// protobuf's canonical JSON mapping with the .proto field names), the format of PROTOCOL.md section 1.
#include <string>
#include <vector>

#include "engine/trajectory.h"
#include "proto/trajectory.pb.h"

namespace crl {

// Segment s of a trajectory as its export record (metadata of the trajectory included).
proto::Segment to_proto(const Trajectory& trajectory, size_t s);
// Rebuilds trajectories from export records (consecutive records with the same rollout_id form one).
// Throws crl::Error naming `where` and the record on inconsistent input.
std::vector<Trajectory> from_proto(const std::vector<proto::Segment>& segments, const std::string& where);

std::string to_jsonl(const std::vector<Trajectory>& trajectories);
std::string to_binary(const std::vector<Trajectory>& trajectories);  // a serialized proto::TrajectoryFile

// Reads a .jsonl or binary (.pb) trajectory file; the format is recognised from the content.
std::vector<Trajectory> read_trajectories(const std::string& path);
// Writes atomically; `.jsonl` gives JSONL, anything else binary protobuf.
void write_trajectories(const std::string& path, const std::vector<Trajectory>& trajectories);

}  // namespace crl
