#include "engine/trace.h"

#include <sstream>

namespace crl {

namespace {

// Makes decoded text printable on one line: newlines and control bytes become escapes.
std::string one_line(const std::string& text, int width) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 32) {
      out += '?';
    } else {
      out += c;
    }
  }
  if (width > 0 && static_cast<int>(out.size()) > width) out = out.substr(0, width - 3) + "...";
  return out;
}

struct Run {
  size_t begin, end;
  Provenance provenance;
};

std::vector<Run> runs_of(const std::vector<Provenance>& provenance) {
  std::vector<Run> runs;
  for (size_t i = 0; i < provenance.size(); ++i) {
    if (runs.empty() || runs.back().provenance != provenance[i]) {
      runs.push_back(Run{i, i + 1, provenance[i]});
    } else {
      runs.back().end = i + 1;
    }
  }
  return runs;
}

}  // namespace

std::string format_trace(const Trajectory& t, const Decoder& decode, const TraceOptions& options) {
  std::ostringstream out;
  out << "rollout " << t.rollout_id << "\n  env " << t.env << ", task " << t.task_id << ", seed " << t.seed
      << ", sample " << t.sample_index << "\n  reward " << t.reward << ", status "
      << episode_status_name(t.status);
  if (!t.reason.empty()) out << " (" << t.reason << ")";
  out << "\n  compactions " << t.compactions << ", segments " << t.segments.size() << " emitted";
  if (t.dropped_segments > 0) out << " + " << t.dropped_segments << " without sampled tokens (not emitted)";
  out << ", sampled tokens " << t.sampled_tokens() << "\n";
  for (size_t s = 0; s < t.segments.size(); ++s) {
    const Segment& seg = t.segments[s];
    int64_t critic = 0;
    for (uint8_t m : seg.critic_mask) critic += m;
    out << "\nsegment " << s << ": " << segment_kind_name(seg.kind) << " (after " << seg.compaction_index
        << " compaction" << (seg.compaction_index == 1 ? "" : "s") << ")\n";
    // The prompt's composition tells where the window came from (fresh start, or resume + copied tail).
    int64_t by_kind[6] = {0, 0, 0, 0, 0, 0};
    for (Provenance p : seg.prompt_provenance) ++by_kind[static_cast<int>(p)];
    out << "  prompt " << seg.prompt_ids.size() << " tokens:";
    for (int p = 0; p < 6; ++p) {
      if (by_kind[p] > 0) out << " " << provenance_name(static_cast<Provenance>(p)) << " " << by_kind[p];
    }
    out << "\n  response " << seg.response_ids.size() << " tokens, trainable: actor " << seg.n_sampled
        << ", critic " << critic << "; N_after " << seg.n_after;
    if (!seg.finish_reason.empty()) out << "; finish " << seg.finish_reason;
    out << "\n";
    if (seg.kind == SegmentKind::kSummary) {
      out << "  summary: \"" << one_line(seg.text.empty() ? decode(seg.response_ids) : seg.text, 0) << "\"\n";
      continue;
    }
    const std::vector<Run> runs = runs_of(seg.response_provenance);
    const size_t shown = options.runs_shown > 0 ? static_cast<size_t>(options.runs_shown) : runs.size();
    for (size_t r = 0; r < runs.size(); ++r) {
      if (runs.size() > 2 * shown && r == shown) {
        out << "    ... " << runs.size() - 2 * shown << " more runs ...\n";
        r = runs.size() - shown - 1;
        continue;
      }
      const Run& run = runs[r];
      const bool trainable = seg.actor_mask[run.begin] == 1;
      const std::span<const TokenId> ids(seg.response_ids.data() + run.begin, run.end - run.begin);
      out << "    " << (trainable ? "[train] " : "        ") << provenance_name(run.provenance) << " x"
          << run.end - run.begin << ": " << one_line(decode(ids), options.text_width) << "\n";
    }
  }
  return out.str();
}

}  // namespace crl
