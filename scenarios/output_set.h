#pragma once
// Crash-safe outputs of `crl run` (issue 14 item 13, issue 16): what a SIGKILL at any moment leaves behind.
//
//  * write_file_durable(): one file, as a temporary `NAME.tmp.PID` in the same folder, fsync'd, renamed over
//    NAME, then the folder fsync'd, so after a crash NAME is either the old file or the new one, whole.
//  * publish_files(): a set of files (summary.json, curves.csv, curves.svg, report.md) that belong together.
//    They are first written whole into a staging folder `DIR/.staging.PID`; then the marker `DIR/INCOMPLETE`
//    is written, the files are renamed into DIR one by one, and the marker is removed. So DIR holds the old
//    set, the new set, or a mixed set together with INCOMPLETE (a reader checks that one file), never a
//    mixed set without it. The marker stays until a later publish completes.
//  * remove_stale_temporaries(): what killed processes left: `*.tmp.PID` files and `.staging.PID` folders
//    under DIR (recursively) whose process PID no longer exists. `crl run` calls it when it starts and after
//    it published, so no temporaries outlive the next run. Temporaries of a live process are left alone.
//
// Test hook: when the environment variable CRL_TEST_KILL_AFTER_WRITES=N is set, the process kills itself with
// SIGKILL right after its N-th durable step (a file renamed into place, one file of a set renamed, the marker
// removed), so that a test can stop `crl run` between any two of its writes
// (tests/scenarios/resume_test.cpp).
#include <string>
#include <utility>
#include <vector>

namespace crl::scenarios {

inline constexpr const char* kIncompleteMarker = "INCOMPLETE";

// Throws crl::Error naming the path when a step fails (the temporary is removed then).
void write_file_durable(const std::string& path, const std::string& content);

// (file name, content) pairs, published into `dir` (created if needed) as one set.
void publish_files(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files);

// Removes temporaries of dead processes under `dir` (a missing folder is fine). Returns how many.
int remove_stale_temporaries(const std::string& dir);

}  // namespace crl::scenarios
