#pragma once
// Checkpoint files of a scenario run (format: proto/checkpoint.proto; README: scenarios/README.md).
//
// Layout under a run's output folder DIR:
//   DIR/checkpoints/<arm>/seed-<seed>/episode-<training episodes done, 10 digits>.ckpt
// The arm's name is kept when it is made of letters, digits, '.', '_' and '-' (not starting with '.'), and
// otherwise percent-encoded byte by byte, so that any arm name is one safe path component.
// Every file is written with write_file_durable() (temporary, fsync, rename), so a file with the .ckpt name
// is always complete; the newest is the one with the most episodes.
//
// read_checkpoint() checks the format tag, the version and the SHA-256 of the payload, and names the file
// and what is wrong: "not a checkpoint or truncated", "corrupted: SHA-256 ... differs", "version 7, this
// build reads version 1".
#include <cstdint>
#include <string>
#include <vector>

#include "proto/checkpoint.pb.h"

namespace crl::scenarios {

inline constexpr uint32_t kCheckpointVersion = 1;
inline constexpr const char* kCheckpointFormat = "crl.checkpoint";

// The file's bytes for a checkpoint (deterministic: same checkpoint, same bytes).
std::string encode_checkpoint(const proto::checkpoint::Checkpoint& checkpoint);
// Parses and checks bytes; `path` names them in errors. Throws crl::Error.
proto::checkpoint::Checkpoint decode_checkpoint(const std::string& bytes, const std::string& path);

void write_checkpoint(const std::string& path, const proto::checkpoint::Checkpoint& checkpoint);
proto::checkpoint::Checkpoint read_checkpoint(const std::string& path);

std::string checkpoint_folder(const std::string& out_dir, const std::string& arm, uint64_t seed);
std::string checkpoint_path(const std::string& out_dir, const std::string& arm, uint64_t seed,
                            int64_t episodes_done);
// The .ckpt files of a folder, newest (most episodes) first; empty when the folder does not exist.
std::vector<std::string> list_checkpoints(const std::string& folder);
// Removes the .ckpt files of a folder (a fresh run must not leave older checkpoints for --resume to find).
void remove_checkpoints(const std::string& folder);

}  // namespace crl::scenarios
