#pragma once
// A progress line for long commands (`crl run`, `crl eval`, `crl rollout`, `crl simulate`): done/total, the
// current stage (arm, seed, ...), the rate and an ETA, on stderr.
//
// --progress auto|always|never (add_progress_option): auto draws only when stderr is a terminal, so logs and
// pipes stay quiet. On a terminal the line is redrawn in place ("\r", clear to end of line); with `always`
// into a file or pipe each update is its own line. Updates are rate-limited (at most 4 a second) except the
// final one, which ends with a newline ("... done in 3.2 s") on a terminal too, so the shell prompt starts
// on a fresh line.
//
// Why results cannot depend on it: the reporter only reads counters that the work publishes; wall-clock
// time is read here and nowhere that shapes a trajectory. advance() is safe and cheap from worker threads: an
// atomic add, and a try_lock so that at most one thread draws while the others go on.
#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace crl::cli {

enum class ProgressMode { kAuto, kAlways, kNever };

// "auto" | "always" | "never"; anything else: crl::Error naming --progress and the value.
ProgressMode parse_progress_mode(const std::string& value);
// Adds `--progress MODE` (default auto) bound to `value`.
void add_progress_option(boost::program_options::options_description& options, std::string& value);

// "PREFIX ARG..." for a report, without --progress (it cannot change a result, and the outputs must be the
// same bytes with and without it), nor the options in `valued` (with their value) and `flags`.
std::string report_command(const std::string& prefix, const std::vector<std::string>& args,
                           const std::vector<std::string>& valued = {},
                           const std::vector<std::string>& flags = {});

class ProgressReporter {
 public:
  // `label`: the command ("crl run toy"); `out`: stderr (tests may pass another stream with `terminal`).
  ProgressReporter(std::string label, ProgressMode mode, std::FILE* out = stderr);
  ProgressReporter(std::string label, ProgressMode mode, std::FILE* out, bool terminal);
  ~ProgressReporter();  // finishes the line if finish() was not called (e.g. on an error: no "done")

  bool enabled() const { return enabled_; }
  void set_total(int64_t total);
  // The current stage, e.g. "arm full, seed 7" (main thread; shown with the next draw).
  void set_stage(std::string stage);
  // `n` more units done; any thread.
  void advance(int64_t n = 1);
  // The final line: done/total and the elapsed time.
  void finish();

 private:
  void draw(bool final);

  std::string label_;
  bool enabled_ = false;
  bool terminal_ = false;
  bool finished_ = false;
  std::FILE* out_;
  std::atomic<int64_t> done_{0};
  std::atomic<int64_t> total_{0};
  std::atomic<int64_t> next_draw_ns_{0};
  std::mutex draw_mutex_;
  std::string stage_;  // guarded by draw_mutex_
  std::chrono::steady_clock::time_point start_;
};

}  // namespace crl::cli
