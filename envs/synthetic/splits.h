#pragma once
// Split files of the synthetic suite: the layout of a namespace (tasks per type and split), generating the
// JSONL files and their SHA-256 manifest, loading them back with file/line errors, checking a folder against
// its manifest, and the balance report printed by `crl splits`. Format: data/README.md.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "envs/synthetic/task.h"

namespace crl::envs::synthetic {

inline constexpr std::string_view kSplitNames[] = {"train", "dev", "test"};
inline constexpr std::string_view kManifestName = "MANIFEST.sha256";

// Tasks per type in each split. Ids per type run 0..train-1 (train), then dev, then test, so an id can never
// appear in two splits.
struct NamespaceLayout {
  std::string name;
  int train = 0;
  int dev = 0;
  int test = 0;
  int per_type(std::string_view split) const;
  int first_index(std::string_view split) const;
};
// Known namespaces: default (80/20/20 per type: 240/60/60) and phase3 (480/60/60: 1440/180/180). Throws
// crl::Error naming the known ones for anything else.
const NamespaceLayout& namespace_layout(const std::string& name_space);
std::vector<std::string> namespace_names();
// data/synthetic for the default namespace, data/synthetic_<namespace> otherwise (relative to the repo).
std::string default_split_dir(const std::string& name_space);

// The tasks of one split, types interleaved (early_fact, latest_update, ordered_plan, early_fact, ...).
std::vector<SyntheticTask> generate_split(const std::string& name_space, std::string_view split);
// JSONL: one task_to_json line per task, each ending in '\n'.
std::string render_split(const std::vector<SyntheticTask>& tasks);

// All files of a namespace, in order: train.jsonl, dev.jsonl, test.jsonl, MANIFEST.sha256 (file name ->
// content). The manifest is in `sha256sum` format, so `sha256sum -c MANIFEST.sha256` also checks a folder.
std::vector<std::pair<std::string, std::string>> generate_split_files(const std::string& name_space);
std::string render_manifest(const std::vector<std::pair<std::string, std::string>>& files);
// Generates and writes every file atomically (temporary file + rename), the manifest last; returns the paths
// written. When `report` is given, the balance report of each split is appended to it.
std::vector<std::string> write_split_files(const std::string& name_space, const std::string& dir,
                                           std::string* report = nullptr);

// Parses a manifest (file name -> lowercase hex SHA-256); throws crl::Error naming the line on bad syntax.
std::map<std::string, std::string> read_manifest(const std::string& path);
// Checks every file listed in DIR/MANIFEST.sha256 (and that the three split files are listed). Returns one
// line per problem, each naming the file; empty when the folder matches.
std::vector<std::string> check_split_dir(const std::string& dir);

// Parses a split file. Every line must be a valid task (task_from_json), of `expected_split` when not empty,
// with no id repeated; the file must end with a newline (a missing one means it was cut short). Errors name
// "path:line". Throws crl::Error.
std::vector<SyntheticTask> parse_split(std::string_view content, const std::string& path,
                                       std::string_view expected_split = {});
// Reads DIR/<split>.jsonl with parse_split; when DIR holds a manifest listing the file, its hash must match
// too (that catches a file cut at a line boundary or edited consistently).
std::vector<SyntheticTask> load_split(const std::string& dir, std::string_view split);

// A human-readable balance report of one split: tasks per type, records per task, tokens per record,
// answer distribution and distractor counts.
std::string balance_report(std::string_view split, const std::vector<SyntheticTask>& tasks);

}  // namespace crl::envs::synthetic
