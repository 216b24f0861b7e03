#include "scenarios/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/proto_bytes.h"
#include "engine/sha256.h"
#include "scenarios/output_set.h"

namespace crl::scenarios {

namespace fs = std::filesystem;
using proto::checkpoint::Checkpoint;
using proto::checkpoint::CheckpointFile;

namespace {

std::string sha256_bytes(const std::string& data) {
  const auto digest = Sha256().update(data).digest();
  return std::string(digest.begin(), digest.end());
}

std::string hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string path_component(const std::string& name) {
  const bool plain = !name.empty() && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
  if (plain) return name;
  std::string out;
  for (unsigned char c : name) {
    char code[4];
    std::snprintf(code, sizeof(code), "%%%02X", c);
    out += (std::isalnum(c) || c == '_' || c == '-') ? std::string(1, static_cast<char>(c)) : code;
  }
  return out.empty() ? "%" : out;
}

}  // namespace

std::string encode_checkpoint(const Checkpoint& checkpoint) {
  CheckpointFile file;
  file.set_format(kCheckpointFormat);
  file.set_version(kCheckpointVersion);
  file.set_payload(deterministic_bytes(checkpoint));
  file.set_payload_sha256(sha256_bytes(file.payload()));
  return deterministic_bytes(file);
}

Checkpoint decode_checkpoint(const std::string& bytes, const std::string& path) {
  CheckpointFile file;
  if (bytes.empty()) throw Error(path, "", "not a checkpoint: the file is empty");
  if (!file.ParseFromString(bytes) || !file.has_format() || !file.has_payload()) {
    throw Error(path, "",
                "not a checkpoint, or truncated (" + std::to_string(bytes.size()) +
                    " bytes do not parse as a crl.checkpoint file with a payload)");
  }
  if (file.format() != kCheckpointFormat) {
    throw Error(path, "format", "is " + quote(file.format()) + ", expected " + quote(kCheckpointFormat));
  }
  if (file.version() != kCheckpointVersion) {
    throw Error(path, "version",
                "version " + std::to_string(file.version()) + ", this build reads version " +
                    std::to_string(kCheckpointVersion));
  }
  const std::string actual = sha256_bytes(file.payload());
  if (file.payload_sha256() != actual) {
    throw Error(path, "payload_sha256",
                "corrupted: the payload's SHA-256 is " + hex(actual) + ", the file says " +
                    (file.payload_sha256().empty() ? std::string("nothing") : hex(file.payload_sha256())));
  }
  Checkpoint checkpoint;
  if (!checkpoint.ParseFromString(file.payload())) {
    throw Error(path, "payload", "the payload matches its SHA-256 but does not parse as a Checkpoint");
  }
  return checkpoint;
}

void write_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  write_file_durable(path, encode_checkpoint(checkpoint));
}

Checkpoint read_checkpoint(const std::string& path) {
  return decode_checkpoint(read_file(path), path);
}

std::string checkpoint_folder(const std::string& out_dir, const std::string& arm, uint64_t seed) {
  return (fs::path(out_dir) / "checkpoints" / path_component(arm) / ("seed-" + std::to_string(seed)))
      .string();
}

std::string checkpoint_path(const std::string& out_dir, const std::string& arm, uint64_t seed,
                            int64_t episodes_done) {
  char name[40];
  std::snprintf(name, sizeof(name), "episode-%010lld.ckpt", static_cast<long long>(episodes_done));
  return (fs::path(checkpoint_folder(out_dir, arm, seed)) / name).string();
}

std::vector<std::string> list_checkpoints(const std::string& folder) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return out;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    // Only our own names: episode-<10 digits>.ckpt (temporaries end in .tmp.PID and never match).
    if (name.size() == 23 && name.rfind("episode-", 0) == 0 && name.substr(18) == ".ckpt" &&
        name.substr(8, 10).find_first_not_of("0123456789") == std::string::npos &&
        entry.is_regular_file(ec)) {
      out.push_back(entry.path().string());
    }
  }
  // Zero-padded counts: the names sort by episode.
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

void remove_checkpoints(const std::string& folder) {
  std::error_code ec;
  for (const std::string& path : list_checkpoints(folder)) fs::remove(path, ec);
}

}  // namespace crl::scenarios
