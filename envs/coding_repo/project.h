#pragma once
// The simulated software project behind the `coding_repo` environment: its generator, its tiny interpreter
// and its JSONL form. Nothing here depends on the engine (no Env, no registry, no engine RNG): the split
// files under data/coding_repo/ are a pure function of this file, which a test regenerates byte for byte.
//
// The interpreter that runs a project's functions is interpreter.h.
//
// A project is a handful of Python-like modules (src/<module>.py), one test file per module
// (tests/test_<module>.py, visible to the agent) and a README. Functions are straight-line integer code:
//
//   def scale_total(a, b):
//       """Scales the total of a pricing record."""
//       t = a * 3
//       u = t + b
//       if u > 7:
//           u = u - 2
//       return u
//
// One function carries one injected bug of a kind (bug_kinds()): `operator` (+ - * swapped), `constant`
// (a literal off by one) or `comparison` (a boundary flip, < <-> <=, > <-> >=, == <-> !=). Hidden tests
// (not in any file) grade a submission: the reward is 1 only if every hidden test of every function passes.
//
// The generator draws until three properties hold, so that every task is fair and solvable: the buggy
// function fails at least one visible test and at least one hidden test, and every single-token repair
// (candidate_fixes()) that passes the visible tests of the buggy function also passes its hidden tests.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "envs/coding_repo/interpreter.h"

namespace crl::coding {

struct File {
  std::string path;
  std::string text;  // lines end with '\n'
};

struct Project {
  std::string id;
  std::string bug_kind;  // "operator" | "constant" | "comparison"
  std::string split;     // "train" | "dev" | "test" | "" (generated on the fly)
  uint64_t seed = 0;
  std::vector<File> files;       // sorted by path
  std::vector<TestCase> hidden;  // the verifier's tests
  // Where the bug is (for the README of the data and for tests; never shown to the agent).
  std::string bug_file;
  int bug_line = 0;  // 1-based
  std::string bug_function;
  std::string original_line;
};

const std::vector<std::string>& bug_kinds();

// The generator's own fixed PRNG (SplitMix64) and string hash (FNV-1a 64), so that generation does not
// depend on the engine's streams.
uint64_t project_seed(const std::string& task_id);

// Generates the project of `task_id` with a bug of `bug_kind` (throws std::invalid_argument for an unknown
// kind). Deterministic: the same id and kind give the same project on every platform.
Project generate_project(const std::string& task_id, const std::string& bug_kind,
                         const std::string& split = "");
// The bug kind encoded in an id "repo-<kind>-...", or one picked by the id's hash for other ids.
std::string bug_kind_for(const std::string& task_id);

// The balanced splits: per kind, `per_kind_train` + `per_kind_dev` + `per_kind_test` tasks, interleaved by
// kind in a fixed order. Returns file name -> content for train.jsonl, dev.jsonl, test.jsonl (one project per
// line, canonical JSON with sorted keys).
std::map<std::string, std::string> generate_splits(int per_kind_train = 4, int per_kind_dev = 2,
                                                   int per_kind_test = 2);

std::string project_to_json(const Project& project);
// Throws std::invalid_argument with a message naming the missing or mistyped field.
Project project_from_json(const std::string& line);

}  // namespace crl::coding
