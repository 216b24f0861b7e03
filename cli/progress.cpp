#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>

#include "engine/error.h"

namespace crl::cli {

namespace po = boost::program_options;

namespace {

constexpr int64_t kDrawIntervalNs = 250'000'000;  // at most 4 redraws a second

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// 75 -> "1m15s", 4000 -> "1h06m", 9.5 -> "9.5s".
std::string format_duration(double seconds) {
  char text[32];
  if (seconds < 60) {
    std::snprintf(text, sizeof(text), "%.1fs", seconds);
  } else if (seconds < 3600) {
    const int s = static_cast<int>(seconds);
    std::snprintf(text, sizeof(text), "%dm%02ds", s / 60, s % 60);
  } else {
    const int m = static_cast<int>(seconds / 60);
    std::snprintf(text, sizeof(text), "%dh%02dm", m / 60, m % 60);
  }
  return text;
}

}  // namespace

ProgressMode parse_progress_mode(const std::string& value) {
  if (value == "auto") return ProgressMode::kAuto;
  if (value == "always") return ProgressMode::kAlways;
  if (value == "never") return ProgressMode::kNever;
  throw Error("option --progress", "", "value \"" + value + "\" is not one of auto, always, never");
}

void add_progress_option(po::options_description& options, std::string& value) {
  options.add_options()("progress", po::value(&value)->default_value("auto"),
                        "progress line on stderr: auto (only when stderr is a terminal), always, never");
}

std::string report_command(const std::string& prefix, const std::vector<std::string>& args,
                           const std::vector<std::string>& valued, const std::vector<std::string>& flags) {
  auto has = [](const std::vector<std::string>& list, const std::string& arg) {
    return std::find(list.begin(), list.end(), arg) != list.end();
  };
  std::string command = prefix;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const std::string name = arg.substr(0, arg.find('='));
    if (has(flags, arg)) continue;
    if (name == "--progress" || has(valued, name)) {
      if (name == arg) ++i;  // "--threads 4": the value is the next argument
      continue;
    }
    command += " " + arg;
  }
  return command;
}

ProgressReporter::ProgressReporter(std::string label, ProgressMode mode, std::FILE* out)
    : ProgressReporter(std::move(label), mode, out, isatty(fileno(out)) != 0) {}

ProgressReporter::ProgressReporter(std::string label, ProgressMode mode, std::FILE* out, bool terminal)
    : label_(std::move(label)),
      enabled_(mode == ProgressMode::kAlways || (mode == ProgressMode::kAuto && terminal)),
      terminal_(terminal),
      out_(out),
      start_(std::chrono::steady_clock::now()) {}

ProgressReporter::~ProgressReporter() {
  if (enabled_ && !finished_ && terminal_) {
    std::fputs("\n", out_);  // leave the last line as it was; an error message follows on its own line
    std::fflush(out_);
  }
}

void ProgressReporter::set_total(int64_t total) {
  total_.store(std::max<int64_t>(0, total));
}

void ProgressReporter::set_stage(std::string stage) {
  if (!enabled_) return;
  {
    std::lock_guard lock(draw_mutex_);
    stage_ = std::move(stage);
  }
  advance(0);
}

void ProgressReporter::advance(int64_t n) {
  if (!enabled_) return;
  done_.fetch_add(n, std::memory_order_relaxed);
  const int64_t now = now_ns();
  int64_t next = next_draw_ns_.load(std::memory_order_relaxed);
  if (now < next) return;
  // One thread wins the slot; the others go on without waiting.
  if (!next_draw_ns_.compare_exchange_strong(next, now + kDrawIntervalNs)) return;
  std::unique_lock lock(draw_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || finished_) return;
  draw(false);
}

void ProgressReporter::finish() {
  if (!enabled_) return;
  std::lock_guard lock(draw_mutex_);
  if (finished_) return;
  draw(true);
  finished_ = true;
}

void ProgressReporter::draw(bool final) {
  const int64_t total = total_.load();
  const int64_t done = done_.load();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string line = label_ + ": " + std::to_string(done) + "/" + std::to_string(total);
  if (total > 0) {
    char pct[16];
    std::snprintf(pct, sizeof(pct), " (%.0f%%)",
                  100.0 * static_cast<double>(done) / static_cast<double>(total));
    line += pct;
  }
  if (!stage_.empty() && !final) line += ", " + stage_;
  if (final) {
    line += ", done in " + format_duration(elapsed);
  } else if (done > 0 && total > done) {
    const double eta = elapsed / static_cast<double>(done) * static_cast<double>(total - done);
    line += ", ETA " + format_duration(eta);
  }
  if (terminal_) {
    std::fprintf(out_, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace crl::cli
