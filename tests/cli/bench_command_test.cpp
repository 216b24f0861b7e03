// `crl bench` (cli/bench_command.h): the generated table, the marker rewrite that keeps the hand-written
// text, and a whole run against a stand-in benchmark binary (a shell script that writes Google Benchmark
// JSON).
#include "cli/bench_command.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "cli/command.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "tests/temp_dir.h"

namespace crl::cli {
namespace {

const char* kJson = R"({
  "context": {"num_cpus": 2},
  "benchmarks": [
    {"name": "BM_Fast/64", "run_type": "iteration", "iterations": 1000, "real_time": 2500.0,
     "cpu_time": 2000.0, "time_unit": "ns", "items_per_second": 3.2e6, "calls_per_s": 1.5e5},
    {"name": "BM_Gpu", "run_type": "iteration", "error_occurred": true, "error_message": "no CUDA device"}
  ]
})";

TEST(BenchCommand, TableHasOneRowPerBenchmarkWithRatesAndCounters) {
  const std::string table = format_bench_table(kJson, "x.json");
  EXPECT_NE(table.find("| BM_Fast/64 | 2.5 us | 2 us | 1000 | 3.2 M/s | - | calls_per_s 150 k |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| BM_Gpu | skipped: no CUDA device |"), std::string::npos) << table;
  EXPECT_THROW(format_bench_table("{\"context\": {}}", "x.json"), Error);
  EXPECT_THROW(format_bench_table("not json", "x.json"), Error);
}

TEST(BenchCommand, MarkersReplaceOnlyTheirBlockAndMissingOnesAreAppended) {
  const std::string md =
      "# Results\n\n## Engine\n\nhand text\n\n<!-- bench:engine -->\nold table\n<!-- /bench:engine "
      "-->\n\nmore "
      "hand text\n";
  const std::string out = replace_bench_block(md, "engine", "new table\n");
  EXPECT_EQ(out,
            "# Results\n\n## Engine\n\nhand text\n\n<!-- bench:engine -->\nnew table\n<!-- /bench:engine "
            "-->\n\nmore "
            "hand text\n");
  EXPECT_EQ(replace_bench_block(out, "engine", "new table\n"), out);  // idempotent
  const std::string appended = replace_bench_block(out, "tokenizer", "t\n");
  EXPECT_EQ(appended.rfind(out, 0), 0u);  // everything before is kept
  EXPECT_NE(
      appended.find(
          "## `bench_tokenizer` (generated)\n\n<!-- bench:tokenizer -->\nt\n<!-- /bench:tokenizer -->\n"),
      std::string::npos);
  EXPECT_THROW(replace_bench_block("<!-- bench:engine -->\nno end", "engine", "x\n"), Error);
}

TEST(BenchCommand, RunsEveryBuiltBinaryAndRewritesItsTable) {
  const test::TempDir temp;
  const std::filesystem::path dir = temp.path();
  std::filesystem::create_directories(dir / "bench");
  // A stand-in for a Google Benchmark binary: writes the JSON to --benchmark_out and checks its filter.
  const std::string script = (dir / "bench" / "bench_simulation").string();
  write_file_atomic(
      script,
      "#!/bin/sh\nout=''\nfor a in \"$@\"; do case \"$a\" in --benchmark_out=*) out=\"${a#*=}\";; "
      "--benchmark_filter=.) ;; --benchmark_filter=*) exit 3;; esac; done\ncat > \"$out\" <<'END'\n" +
          std::string(kJson) + "\nEND\n");
  chmod(script.c_str(), 0755);
  const std::string results = (dir / "RESULTS.md").string();
  write_file_atomic(results,
                    "# R\n\nkept\n\n<!-- bench:simulation -->\nold\n<!-- /bench:simulation -->\ntail\n");
  ASSERT_EQ(run_cli({"bench", "--bench-dir", (dir / "bench").string(), "--out", results}), 0);
  const std::string md = read_file(results);
  EXPECT_EQ(md.rfind("# R\n\nkept\n\n<!-- bench:simulation -->\nLast `crl bench` run: ", 0), 0u) << md;
  EXPECT_NE(md.find("| BM_Fast/64 |"), std::string::npos) << md;
  EXPECT_EQ(md.find("old"), std::string::npos);
  EXPECT_NE(md.find("<!-- /bench:simulation -->\ntail\n"), std::string::npos);
  // A filter that matches no binary runs nothing and changes nothing.
  ASSERT_EQ(
      run_cli({"bench", "--bench-dir", (dir / "bench").string(), "--out", results, "--filter", "^engine$"}),
      0);
  EXPECT_EQ(read_file(results), md);
  EXPECT_EQ(run_cli({"bench", "--bench-dir", (dir / "bench").string(), "--out", results, "--filter", "("}),
            1);
}

}  // namespace
}  // namespace crl::cli
