#pragma once
// `crl bench`: runs every benchmark binary that was built (build/bench/bench_*) with a per-binary filter and
// minimum time chosen so the whole run stays under 10 minutes on 2 cores, and rewrites the generated tables
// of bench/RESULTS.md from Google Benchmark's JSON output. scripts/bench.sh builds the binaries and calls it.
//
// In bench/RESULTS.md a generated table lives between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`
// (NAME = the binary without its `bench_` prefix); everything outside the markers is hand-written and kept
// byte for byte. A binary whose markers are missing gets a new section at the end of the file.
#include <string>
#include <utility>
#include <vector>

namespace crl::cli {

struct BenchPlan {
  std::string name;                                      // marker name; the binary is bench_<name>
  std::string filter;                                    // --benchmark_filter
  double min_time = 0.1;                                 // --benchmark_min_time (seconds)
  std::vector<std::pair<std::string, std::string>> env;  // environment variables for the run
  std::string why;                                       // why this filter (shown by --list)
};

// The known binaries and their settings; a built binary that is not listed runs with filter "." and 0.1 s.
const std::vector<BenchPlan>& bench_plans();
BenchPlan bench_plan_for(const std::string& name);

// A Markdown table (one row per benchmark run, aggregates included) from Google Benchmark's JSON output.
// Throws crl::Error (naming `where`) when the text is not such output.
std::string format_bench_table(const std::string& json_text, const std::string& where);
// Replaces the text between the markers of `name` with `block` (which must not contain markers), or
// appends "## `bench_NAME` (generated)" with the markers at the end when they are missing.
std::string replace_bench_block(const std::string& markdown, const std::string& name,
                                const std::string& block);

}  // namespace crl::cli
