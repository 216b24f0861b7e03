#include "envs/synthetic/splits.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/sha256.h"

namespace crl::envs::synthetic {

namespace {

const std::vector<NamespaceLayout>& layouts() {
  static const std::vector<NamespaceLayout> kLayouts = {
      {"default", 80, 20, 20}, {"phase3", 480, 60, 60}, {std::string(kHardNamespace), 80, 20, 20}};
  return kLayouts;
}

std::string split_file_name(std::string_view split) {
  return std::string(split) + ".jsonl";
}

bool is_hex_digest(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string format_fixed(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", value);
  return buf;
}

// "min 6 mean 8.0 max 10" over a list of counts.
std::string min_mean_max(const std::vector<int>& values) {
  if (values.empty()) return "none";
  int lo = values[0], hi = values[0];
  double sum = 0;
  for (int v : values) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  return "min " + std::to_string(lo) + " mean " + format_fixed(sum / values.size()) + " max " +
         std::to_string(hi);
}

// "1-4/5-8/9-12/13-16" for 16 records.
std::string quarter_names(int records) {
  std::string out;
  for (int q = 0; q < 4; ++q) {
    out += (q ? "/" : "") + std::to_string(q * records / 4 + 1) + "-" + std::to_string((q + 1) * records / 4);
  }
  return out;
}

}  // namespace

int NamespaceLayout::per_type(std::string_view split) const {
  if (split == "train") return train;
  if (split == "dev") return dev;
  if (split == "test") return test;
  throw Error("", "split", "value " + quote(split) + " is not train, dev or test");
}

int NamespaceLayout::first_index(std::string_view split) const {
  if (split == "train") return 0;
  if (split == "dev") return train;
  if (split == "test") return train + dev;
  throw Error("", "split", "value " + quote(split) + " is not train, dev or test");
}

const NamespaceLayout& namespace_layout(const std::string& name_space) {
  for (const NamespaceLayout& l : layouts()) {
    if (l.name == name_space) return l;
  }
  throw Error(
      "", "namespace", "unknown synthetic namespace " + quote(name_space) + " (known: " + [] {
        std::string known;
        for (const std::string& n : namespace_names()) known += (known.empty() ? "" : ", ") + n;
        return known;
      }() + ")");
}

std::vector<std::string> namespace_names() {
  std::vector<std::string> names;
  for (const NamespaceLayout& l : layouts()) names.push_back(l.name);
  return names;
}

std::string default_split_dir(const std::string& name_space) {
  return name_space == "default" ? "data/synthetic" : "data/synthetic_" + name_space;
}

std::vector<SyntheticTask> generate_split(const std::string& name_space, std::string_view split) {
  const NamespaceLayout& layout = namespace_layout(name_space);
  const int count = layout.per_type(split);
  const int first = layout.first_index(split);
  std::vector<SyntheticTask> tasks;
  tasks.reserve(count * kTaskTypes.size());
  for (int i = 0; i < count; ++i) {
    for (TaskType type : kTaskTypes) tasks.push_back(generate_task(name_space, type, first + i, split));
  }
  return tasks;
}

std::string render_split(const std::vector<SyntheticTask>& tasks) {
  std::string out;
  for (const SyntheticTask& t : tasks) {
    out += task_to_json(t);
    out += '\n';
  }
  return out;
}

std::string render_manifest(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out;
  for (const auto& [name, content] : files) out += sha256_hex(content) + "  " + name + "\n";
  return out;
}

namespace {
std::vector<std::pair<std::string, std::string>> split_files(const std::string& name_space,
                                                             std::string* report) {
  std::vector<std::pair<std::string, std::string>> files;
  for (std::string_view split : kSplitNames) {
    const std::vector<SyntheticTask> tasks = generate_split(name_space, split);
    files.emplace_back(split_file_name(split), render_split(tasks));
    if (report != nullptr) *report += balance_report(split, tasks);
  }
  files.emplace_back(std::string(kManifestName), render_manifest(files));
  return files;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> generate_split_files(const std::string& name_space) {
  return split_files(name_space, nullptr);
}

std::vector<std::string> write_split_files(const std::string& name_space, const std::string& dir,
                                           std::string* report) {
  std::vector<std::string> written;
  // The manifest comes last, so a folder interrupted half-way fails its check instead of passing it.
  for (const auto& [name, content] : split_files(name_space, report)) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    write_file_atomic(path, content);
    written.push_back(path);
  }
  return written;
}

std::map<std::string, std::string> read_manifest(const std::string& path) {
  const std::string content = read_file(path);
  std::map<std::string, std::string> entries;
  std::istringstream in(content);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = path + ":" + std::to_string(number);
    if (line.empty()) continue;
    // sha256sum format: 64 hex digits, two spaces (or space + '*' for binary mode), the file name.
    if (line.size() < 67 || !is_hex_digest(line.substr(0, 64)) || line[64] != ' ' ||
        (line[65] != ' ' && line[65] != '*')) {
      throw Error(where, "", "expected `<64 hex digits>  <file name>`, found " + quote(line));
    }
    const std::string name = line.substr(66);
    if (!entries.emplace(name, line.substr(0, 64)).second)
      throw Error(where, "", "file " + quote(name) + " listed twice");
  }
  return entries;
}

std::vector<std::string> check_split_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string manifest_path = (fs::path(dir) / kManifestName).string();
  if (!fs::exists(manifest_path)) return {manifest_path + ": missing (no manifest to check against)"};
  std::map<std::string, std::string> entries;
  try {
    entries = read_manifest(manifest_path);
  } catch (const Error& e) {
    return {e.what()};
  }
  std::vector<std::string> problems;
  for (std::string_view split : kSplitNames) {
    if (!entries.count(split_file_name(split))) {
      problems.push_back(manifest_path + ": does not list " + split_file_name(split));
    }
  }
  for (const auto& [name, expected] : entries) {
    const std::string path = (fs::path(dir) / name).string();
    if (!fs::exists(path)) {
      problems.push_back(path + ": missing");
      continue;
    }
    std::string content;
    try {
      content = read_file(path);
    } catch (const Error& e) {
      problems.push_back(e.what());
      continue;
    }
    const std::string actual = sha256_hex(content);
    if (actual != expected) {
      problems.push_back(path + ": differs from the manifest (sha256 " + actual + ", manifest " + expected +
                         ")");
    }
  }
  return problems;
}

std::vector<SyntheticTask> parse_split(std::string_view content, const std::string& path,
                                       std::string_view expected_split) {
  std::vector<SyntheticTask> tasks;
  std::set<std::string> ids;
  size_t begin = 0;
  int number = 0;
  while (begin < content.size()) {
    ++number;
    const std::string where = path + ":" + std::to_string(number);
    const size_t end = content.find('\n', begin);
    if (end == std::string_view::npos) {
      // Our writer ends every line with '\n': a last line without one was cut short, even if it parses.
      throw Error(where, "", "truncated: the last line has no newline (file cut short?)");
    }
    const std::string_view line = content.substr(begin, end - begin);
    if (line.empty()) throw Error(where, "", "empty line (expected one task per line)");
    SyntheticTask task = task_from_json(line, where);
    if (!expected_split.empty() && task.split != expected_split) {
      throw Error(where, "split",
                  "value " + quote(task.split) + " in the " + std::string(expected_split) + " file");
    }
    if (!ids.insert(task.task_id).second)
      throw Error(where, "task_id", "value " + quote(task.task_id) + " repeats");
    tasks.push_back(std::move(task));
    begin = end + 1;
  }
  if (tasks.empty()) throw Error(path, "", "no tasks (empty file)");
  return tasks;
}

std::vector<SyntheticTask> load_split(const std::string& dir, std::string_view split) {
  namespace fs = std::filesystem;
  if (std::find(std::begin(kSplitNames), std::end(kSplitNames), split) == std::end(kSplitNames)) {
    throw Error("", "split", "value " + quote(split) + " is not train, dev or test");
  }
  const std::string name = split_file_name(split);
  const std::string path = (fs::path(dir) / name).string();
  const std::string content = read_file(path);
  std::vector<SyntheticTask> tasks = parse_split(content, path, split);
  const std::string manifest_path = (fs::path(dir) / kManifestName).string();
  if (fs::exists(manifest_path)) {
    const auto entries = read_manifest(manifest_path);
    auto it = entries.find(name);
    if (it != entries.end() && it->second != sha256_hex(content)) {
      throw Error(path, "",
                  "content differs from " + manifest_path +
                      " (cut short at a line boundary or edited); regenerate with `crl splits`");
    }
  }
  return tasks;
}

std::string balance_report(std::string_view split, const std::vector<SyntheticTask>& tasks) {
  std::ostringstream out;
  std::map<TaskType, std::vector<const SyntheticTask*>> by_type;
  std::vector<int> records, tokens;
  for (const SyntheticTask& t : tasks) {
    by_type[t.type].push_back(&t);
    records.push_back(static_cast<int>(t.records.size()));
    for (const Record& r : t.records) tokens.push_back(approx_tokens(r.text));
  }
  out << "split " << split << ": " << tasks.size() << " tasks (";
  for (TaskType type : kTaskTypes) {
    out << (type == kTaskTypes[0] ? "" : ", ") << task_type_name(type) << " " << by_type[type].size();
  }
  out << ")\n";
  out << "  records per task: " << min_mean_max(records)
      << "; approx tokens per record: " << min_mean_max(tokens) << "\n";
  for (TaskType type : kTaskTypes) {
    const auto& list = by_type[type];
    std::map<std::string, int> answers;
    std::vector<int> distractors, milestones;
    // Where the last answer-bearing record sits, by quarter of the episode: tells whether the answer can
    // usually be read from the recent tail.
    int quarter[4] = {0, 0, 0, 0};
    int records_per = list.empty() ? kRecordsPerTask : static_cast<int>(list.front()->records.size());
    for (const SyntheticTask* t : list) {
      ++answers[t->answer];
      milestones.push_back(static_cast<int>(t->milestones.size()));
      const int n = static_cast<int>(t->records.size());
      quarter[std::min(3, t->milestones.back() * 4 / n)]++;
      int d = 0;
      for (int i = 0; i < n; ++i) {
        const Record& r = t->records[i];
        const bool is_milestone =
            std::find(t->milestones.begin(), t->milestones.end(), i) != t->milestones.end();
        if (!is_milestone && value_domain(r.value) == answer_domain(type)) ++d;
      }
      distractors.push_back(d);
    }
    int most = 0;
    for (const auto& [a, n] : answers) most = std::max(most, n);
    out << "  " << task_type_name(type) << ": answers " << answers.size() << " distinct of " << list.size()
        << " (most frequent x" << most << "); answer records per task " << min_mean_max(milestones)
        << "; distractors " << min_mean_max(distractors) << "; last answer record in records "
        << quarter_names(records_per) << ": " << quarter[0] << "/" << quarter[1] << "/" << quarter[2] << "/"
        << quarter[3] << "\n";
  }
  return out.str();
}

}  // namespace crl::envs::synthetic
