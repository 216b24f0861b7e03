#include "ui/viewer_data.h"

#include <map>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/json_text.h"
#include "engine/trajectory_io.h"
#include "engine/unicode_data.h"

namespace crl::ui {
namespace {

using nlohmann::json;

// A token's text for labelling it. A token may hold part of a UTF-8 character (byte-level tokenizers):
// such bytes are shown as \xNN rather than replaced, so the reader sees exactly what is there.
std::string readable_piece(const std::string& text) {
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = 0;
    const size_t n = unicode::decode_utf8(text, pos, &cp);
    if (cp == unicode::kInvalid) {
      static constexpr char kHex[] = "0123456789abcdef";
      for (size_t i = 0; i < n; ++i) {
        const auto byte = static_cast<uint8_t>(text[pos + i]);
        out += "\\x";
        out += kHex[byte >> 4];
        out += kHex[byte & 15];
      }
    } else {
      out.append(text, pos, n);
    }
    pos += n;
  }
  return out;
}

std::vector<double> number_array(const json& segment, const char* key, const std::string& where,
                                 const std::string& at, bool required) {
  const auto it = segment.find(key);
  if (it == segment.end()) {
    if (required) throw Error(where, at + "." + key, "missing (expected an array with one number per token)");
    return {};
  }
  if (!it->is_array()) throw Error(where, at + "." + key, "expected an array of numbers, got " + it->dump());
  std::vector<double> out;
  out.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number()) {
      throw Error(where, at + "." + key + "[" + std::to_string(i) + "]",
                  "expected a number, got " + json_text(v));
    }
    out.push_back(v.get<double>());
  }
  return out;
}

double number_or(const json& object, const char* key, double fallback, const std::string& where,
                 const std::string& at) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw Error(where, at + "." + key, "expected a number, got " + it->dump());
  return it->get<double>();
}

// Checks one rollout's advantages against its trajectory: same segment count, one value per response token.
void check_shapes(const RolloutAdvantages& adv, const Trajectory& t, const std::string& where, size_t r) {
  const std::string at = "rollouts[" + std::to_string(r) + "]";
  if (adv.segments.size() != t.segments.size()) {
    throw Error(where, at + ".segments",
                std::to_string(adv.segments.size()) + " segments, but rollout " + quote(t.rollout_id) +
                    " of the trajectory file has " + std::to_string(t.segments.size()));
  }
  for (size_t s = 0; s < t.segments.size(); ++s) {
    const SegmentAdvantages& a = adv.segments[s];
    const size_t tokens = t.segments[s].response_ids.size();
    const auto check = [&](const std::vector<double>& values, const char* name, bool optional) {
      if (optional && values.empty()) return;
      if (values.size() != tokens) {
        throw Error(where, at + ".segments[" + std::to_string(s) + "]." + name,
                    std::to_string(values.size()) + " values, but segment " + std::to_string(s) +
                        " of rollout " + quote(t.rollout_id) + " has " + std::to_string(tokens) +
                        " response tokens");
      }
    };
    check(a.advantages, "advantages", false);
    check(a.returns, "returns", true);
    check(a.values, "values", true);
  }
}

json advantages_json(const RolloutAdvantages& adv) {
  json out = json::array();
  for (const SegmentAdvantages& s : adv.segments) {
    out.push_back({{"advantages", s.advantages},
                   {"returns", s.returns},
                   {"values", s.values},
                   {"lambda", s.lambda},
                   {"factor", s.factor},
                   {"n_after", s.n_after}});
  }
  return out;
}

}  // namespace

AdvantageTable parse_advantages_result(const std::string& text, const std::string& where) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(where, "",
                std::string("not valid JSON (expected `crl advantages` result.json): ") + e.what());
  }
  if (!doc.is_object() || !doc.contains("rollouts") || !doc["rollouts"].is_array()) {
    throw Error(where, "rollouts",
                "missing (expected `crl advantages` result.json: an object with \"rollouts\")");
  }
  AdvantageTable table;
  table.source = where;
  for (size_t r = 0; r < doc["rollouts"].size(); ++r) {
    const json& ro = doc["rollouts"][r];
    const std::string at = "rollouts[" + std::to_string(r) + "]";
    if (!ro.is_object() || !ro.contains("segments") || !ro["segments"].is_array()) {
      throw Error(where, at + ".segments", "missing (expected an array of segments)");
    }
    RolloutAdvantages adv;
    if (ro.contains("id")) {
      if (!ro["id"].is_string()) throw Error(where, at + ".id", "expected a string, got " + ro["id"].dump());
      adv.id = ro["id"].get<std::string>();
    }
    for (size_t s = 0; s < ro["segments"].size(); ++s) {
      const json& so = ro["segments"][s];
      const std::string sat = at + ".segments[" + std::to_string(s) + "]";
      if (!so.is_object()) throw Error(where, sat, "expected an object");
      SegmentAdvantages seg;
      seg.advantages = number_array(so, "advantages", where, sat, true);
      seg.returns = number_array(so, "returns", where, sat, false);
      seg.values = number_array(so, "values", where, sat, false);
      seg.lambda = number_or(so, "lambda", 0.0, where, sat);
      seg.factor = number_or(so, "factor", 1.0, where, sat);
      seg.n_after = static_cast<int64_t>(number_or(so, "n_after", 0.0, where, sat));
      adv.segments.push_back(std::move(seg));
    }
    table.rollouts.push_back(std::move(adv));
  }
  return table;
}

std::string viewer_data_json(const ViewerInput& input) {
  const auto& trajectories = input.trajectories;
  CRL_CHECK(input.decoders.empty() || input.decoders.size() == trajectories.size(),
            "one decoder per trajectory");
  CRL_CHECK(input.decoder_keys.size() == input.decoders.size(), "one decoder key per decoder");

  // Matches each trajectory with its advantages: by id when the result names its rollouts, else by position.
  std::vector<const RolloutAdvantages*> matched(trajectories.size(), nullptr);
  if (input.advantages) {
    const AdvantageTable& table = *input.advantages;
    if (table.rollouts.size() != trajectories.size()) {
      throw Error(table.source, "rollouts",
                  std::to_string(table.rollouts.size()) + " rollouts, but the trajectory file " +
                      quote(input.source) + " has " + std::to_string(trajectories.size()));
    }
    std::map<std::string, size_t> by_id;
    for (size_t r = 0; r < table.rollouts.size(); ++r) {
      if (!table.rollouts[r].id.empty()) by_id.emplace(table.rollouts[r].id, r);
    }
    for (size_t i = 0; i < trajectories.size(); ++i) {
      size_t r = i;
      if (!table.rollouts[i].id.empty()) {
        const auto it = by_id.find(trajectories[i].rollout_id);
        if (it == by_id.end()) {
          throw Error(table.source, "rollouts",
                      "no rollout with id " + quote(trajectories[i].rollout_id) + " (rollout " +
                          std::to_string(i) + " of " + quote(input.source) + ")");
        }
        r = it->second;
      }
      check_shapes(table.rollouts[r], trajectories[i], table.source, r);
      matched[i] = &table.rollouts[r];
    }
  }

  // The text of every id each decoder sees, once per decoder key (a vocabulary table, not per-token text:
  // a 100k-token rollout over a byte tokenizer needs at most 259 entries).
  std::map<std::string, int> vocab_index;
  std::vector<std::map<TokenId, std::string>> vocabs;
  std::vector<int> vocab_of(trajectories.size(), -1);
  for (size_t i = 0; i < input.decoders.size(); ++i) {
    if (!input.decoders[i]) continue;
    const auto [it, added] = vocab_index.emplace(input.decoder_keys[i], static_cast<int>(vocabs.size()));
    if (added) vocabs.emplace_back();
    vocab_of[i] = it->second;
    auto& vocab = vocabs[it->second];
    for (const Segment& s : trajectories[i].segments) {
      for (const auto* ids : {&s.prompt_ids, &s.response_ids}) {
        for (TokenId id : *ids) {
          if (vocab.count(id)) continue;
          vocab[id] = readable_piece(input.decoders[i](std::span<const TokenId>(&id, 1)));
        }
      }
    }
  }

  json doc;
  doc["version"] = 1;
  doc["source"] = input.source;
  doc["advantages_source"] = input.advantages ? input.advantages->source : "";
  doc["vocabs"] = json::array();
  for (const auto& vocab : vocabs) {
    json v = json::object();
    for (const auto& [id, text] : vocab) v[std::to_string(id)] = text;
    doc["vocabs"].push_back(std::move(v));
  }
  doc["rollouts"] = json::array();
  for (size_t i = 0; i < trajectories.size(); ++i) {
    json ro;
    ro["vocab"] = vocab_of[i];
    // The export records exactly as `crl run --out t.jsonl` writes them (one line per segment).
    ro["segments"] = json::array();
    const std::string lines = to_jsonl({trajectories[i]});
    for (size_t pos = 0; pos < lines.size();) {
      const size_t end = lines.find('\n', pos);
      ro["segments"].push_back(json::parse(lines.substr(pos, end - pos)));
      pos = end + 1;
    }
    if (matched[i] != nullptr) ro["advantages"] = advantages_json(*matched[i]);
    doc["rollouts"].push_back(std::move(ro));
  }
  // Environment text may not be valid UTF-8 (a response_text, a metadata value): replace, never throw.
  return json_text(doc);
}

}  // namespace crl::ui
