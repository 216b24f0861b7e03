#include "envs/synthetic/metrics.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "envs/synthetic/symbolic.h"

namespace crl::envs::synthetic {

namespace {

// The shared rule of both views, applied to the mentions in order.
SummaryMetrics classify(const SyntheticTask& task, int records_seen,
                        const std::vector<std::string>& mentions) {
  SummaryMetrics m;
  const std::vector<int> kept = observed_milestones(task, records_seen);
  m.observed_milestones = static_cast<int>(kept.size());
  std::vector<int> times_named(kept.size(), 0);
  for (const std::string& value : mentions) {
    ++m.mentions;
    const auto it =
        std::find_if(kept.begin(), kept.end(), [&](int i) { return task.records[i].value == value; });
    if (it != kept.end()) {
      if (times_named[it - kept.begin()]++ == 0) {
        ++m.recalled;
      } else {
        ++m.repeated;
      }
      continue;
    }
    bool superseded = false;
    if (task.type == TaskType::kLatestUpdate) {
      for (int i : task.milestones) {
        if (i < records_seen && task.records[i].value == value) superseded = true;
      }
    }
    if (superseded) {
      ++m.superseded;
    } else {
      ++m.invented;
    }
  }
  return m;
}

}  // namespace

double SummaryMetrics::precision() const {
  const int judged = mentions - superseded;
  if (judged == 0) return observed_milestones == 0 ? 1.0 : 0.0;
  return static_cast<double>(recalled) / judged;
}

double SummaryMetrics::f1() const {
  const double p = precision(), r = recall();
  return p + r == 0 ? 0.0 : 2 * p * r / (p + r);
}

std::vector<int> observed_milestones(const SyntheticTask& task, int records_seen) {
  std::vector<int> seen;
  for (int i : task.milestones) {
    if (i < records_seen) seen.push_back(i);
  }
  // For latest_update only the newest observed value is still needed.
  if (task.type == TaskType::kLatestUpdate && seen.size() > 1) seen.erase(seen.begin(), seen.end() - 1);
  return seen;
}

SummaryMetrics summary_metrics_text(const SyntheticTask& task, int records_seen, std::string_view summary) {
  const ValueDomain domain = answer_domain(task.type);
  std::vector<std::string> mentions;
  std::string word;
  int length = 0;
  bool in_word = false;
  // One pass: alphanumeric runs are candidate values (so "audit_records" names "audit"); whitespace runs
  // separate the words that make the length.
  for (size_t i = 0; i <= summary.size(); ++i) {
    const char c = i < summary.size() ? summary[i] : ' ';
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      if (value_domain(word) == domain) mentions.push_back(word);
      word.clear();
    }
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!space && !in_word) ++length;
    in_word = !space;
  }
  SummaryMetrics m = classify(task, records_seen, mentions);
  m.length = length;
  return m;
}

SummaryMetrics summary_metrics_symbols(const SyntheticTask& task, int records_seen,
                                       std::span<const TokenId> summary) {
  const Vocabulary& v = Vocabulary::get();
  const ValueDomain domain = answer_domain(task.type);
  std::vector<std::string> mentions;
  int length = 0;
  for (const TokenId id : summary) {
    ++length;
    if (id == v.stop) break;
    std::string value;
    if (const int index = v.keep_index(id); index >= 0) {
      value = task.records[index].value;  // a record not yet seen still names its (future) value
    } else {
      value = std::string(v.value_of(id));
    }
    if (!value.empty() && value_domain(value) == domain) mentions.push_back(value);
  }
  SummaryMetrics m = classify(task, records_seen, mentions);
  m.length = length;
  return m;
}

EpisodeMetrics episode_metrics_symbolic(const SyntheticTask& task, const Trajectory& trajectory) {
  const Vocabulary& v = Vocabulary::get();
  EpisodeMetrics m;
  m.task_id = task.task_id;
  m.type = task.type;
  m.exact_match = trajectory.reward > 0.0;
  m.truncated = trajectory.status != EpisodeStatus::kCompleted;
  m.compactions = trajectory.compactions;
  // Records are shown in order and a summary is requested right after an observation, so its prompt (the
  // history) holds the newest record shown: records seen = 1 + the largest index of an observed record run
  // [rec:<i>, kind:...] in the prompt ([rec:<i>, UNSEEN] is not one). Execution windows with only forced
  // `next` actions are not emitted, so the observations themselves cannot be counted.
  auto newest = [&](const std::vector<TokenId>& ids) {
    int seen = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const int index = v.rec_index(ids[i]);
      if (index >= 0 && v.is_kind(ids[i + 1])) seen = std::max(seen, index + 1);
    }
    return seen;
  };
  int seen = 0;
  for (const Segment& seg : trajectory.segments) {
    if (seg.kind == SegmentKind::kSummary) {
      seen = std::max(seen, newest(seg.prompt_ids));
      m.summaries.push_back(summary_metrics_symbols(task, seen, seg.response_ids));
    } else {
      std::vector<TokenId> ids = seg.prompt_ids;
      ids.insert(ids.end(), seg.response_ids.begin(), seg.response_ids.end());
      seen = std::max(seen, newest(ids));
    }
  }
  m.records_seen = seen;
  m.submitted = trajectory.status == EpisodeStatus::kCompleted;
  return m;
}

EpisodeMetrics episode_metrics_text(const SyntheticTask& task, const Trajectory& trajectory,
                                    const Codec& codec) {
  EpisodeMetrics m;
  m.task_id = task.task_id;
  m.type = task.type;
  m.exact_match = trajectory.reward > 0.0;
  m.truncated = trajectory.status != EpisodeStatus::kCompleted;
  m.compactions = trajectory.compactions;
  // Records are rendered "#NN/TT ref ..." and shown in order; only observation tokens are read, so nothing
  // the policy wrote (an action, a summary, a copied summary) can count as seen.
  auto newest = [](const std::string& text) {
    int seen = 0;
    for (size_t at = text.find('#'); at != std::string::npos; at = text.find('#', at + 1)) {
      size_t end = at + 1;
      int n = 0;
      while (end < text.size() && end < at + 4 && std::isdigit(static_cast<unsigned char>(text[end])))
        n = n * 10 + (text[end++] - '0');
      if (end > at + 1 && end < text.size() && text[end] == '/') seen = std::max(seen, n);
    }
    return seen;
  };
  int seen = 0;
  std::vector<TokenId> observed;
  for (const Segment& seg : trajectory.segments) {
    if (seg.kind == SegmentKind::kSummary) {
      const std::string body = codec.decode(codec.summary_body(seg.response_ids));
      SummaryMetrics sm = summary_metrics_text(task, seen, body);
      sm.length = static_cast<int>(seg.response_ids.size());
      m.summaries.push_back(sm);
      continue;
    }
    observed.clear();
    for (size_t i = 0; i < seg.response_ids.size(); ++i) {
      if (i < seg.response_provenance.size() && seg.response_provenance[i] == Provenance::kEnvironment)
        observed.push_back(seg.response_ids[i]);
    }
    seen = std::max(seen, newest(codec.decode(observed)));
  }
  m.records_seen = seen;
  m.submitted = trajectory.status == EpisodeStatus::kCompleted;
  return m;
}

void MetricsTable::add(const EpisodeMetrics& e) {
  Totals& t = by_type_[static_cast<int>(e.type)];
  ++t.episodes;
  t.exact += e.exact_match ? 1 : 0;
  t.truncated += e.truncated ? 1 : 0;
  t.invalid_commands += e.invalid_commands;
  t.compactions += e.compactions;
  for (const SummaryMetrics& s : e.summaries) {
    ++t.summaries;
    t.mentions += s.mentions;
    t.invented += s.invented;
    t.repeated += s.repeated;
    t.recall_sum += s.recall();
    t.length_sum += s.length;
    t.f1_sum += s.f1();
  }
}

MetricsTable::Totals MetricsTable::all() const {
  Totals a;
  for (const Totals& t : by_type_) {
    a.episodes += t.episodes;
    a.exact += t.exact;
    a.truncated += t.truncated;
    a.invalid_commands += t.invalid_commands;
    a.compactions += t.compactions;
    a.summaries += t.summaries;
    a.mentions += t.mentions;
    a.invented += t.invented;
    a.repeated += t.repeated;
    a.recall_sum += t.recall_sum;
    a.length_sum += t.length_sum;
    a.f1_sum += t.f1_sum;
  }
  return a;
}

std::string MetricsTable::report() const {
  std::string out;
  auto line = [&out](std::string_view name, const Totals& t) {
    char buf[512];
    const double s = t.summaries > 0 ? t.summaries : 1;
    std::snprintf(buf, sizeof buf,
                  "%-14s exact %d/%d  truncated %d  invalid %d  compactions %d  summaries %d  recall %.3f  "
                  "invention %.3f  repeated %d  length %.1f  f1 %.3f\n",
                  std::string(name).c_str(), t.exact, t.episodes, t.truncated, t.invalid_commands,
                  t.compactions, t.summaries, t.recall_sum / s,
                  t.mentions ? static_cast<double>(t.invented) / t.mentions : 0.0, t.repeated,
                  t.length_sum / s, t.f1_sum / s);
    out += buf;
  };
  for (TaskType type : kTaskTypes) line(task_type_name(type), totals(type));
  line("all", all());
  return out;
}

}  // namespace crl::envs::synthetic
