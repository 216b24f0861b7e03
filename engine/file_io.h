#pragma once
// Whole-file reads and crash-safe writes. Outputs are written to a temporary file in the same folder and
// renamed over the target, so a reader never sees a half-written file (DESIGN.md rules).
#include <string>

namespace crl {

// Reads a whole file; throws crl::Error naming the path when it cannot be read.
std::string read_file(const std::string& path);
// The same, with `cannot_open` as the error's message when the file cannot be opened ("" for the default).
std::string read_file(const std::string& path, const std::string& cannot_open);
// Writes `content` to `path` atomically (temporary file + rename), creating parent folders.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace crl
