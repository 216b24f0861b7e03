#include "learners/batch_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/json_reader.h"

namespace crl::learners {

using nlohmann::json;

namespace {

std::string type_of(const json& j) {
  return j.type_name();
}

const json& require(const json& object, const char* key, const std::string& where, const std::string& path) {
  auto it = object.find(key);
  if (it == object.end()) throw Error(where, path + key, "is missing");
  return *it;
}

double number(const json& j, const std::string& where, const std::string& field) {
  if (!j.is_number()) throw Error(where, field, "is a " + type_of(j) + ", expected a number");
  const double x = j.get<double>();
  if (!std::isfinite(x)) throw Error(where, field, "is not finite");
  return x;
}

bool boolean(const json& j, const std::string& where, const std::string& field) {
  if (!j.is_boolean()) throw Error(where, field, "is a " + type_of(j) + ", expected true or false");
  return j.get<bool>();
}

void reject_unknown(const json& object, std::initializer_list<const char*> known, const std::string& where,
                    const std::string& path) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) throw Error(where, path + text_prefix(it.key()), "is not a known field");
  }
}

std::vector<double> number_array(const json& j, const std::string& where, const std::string& field) {
  if (!j.is_array()) throw Error(where, field, "is a " + type_of(j) + ", expected an array of numbers");
  std::vector<double> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    // The element's field name is built only for the error: these arrays hold one number per token.
    const json& x = j[i];
    const double v = x.is_number() ? x.get<double>() : NAN;
    out.push_back(std::isfinite(v) ? v : number(x, where, field + "[" + std::to_string(i) + "]"));
  }
  return out;
}

std::vector<uint8_t> mask_array(const json& j, const std::string& where, const std::string& field) {
  if (!j.is_array()) throw Error(where, field, "is a " + type_of(j) + ", expected an array of 0/1");
  std::vector<uint8_t> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const json& x = j[i];
    if (x.is_boolean()) {
      out.push_back(x.get<bool>() ? 1 : 0);
    } else if (x.is_number_integer() && (x.get<int64_t>() == 0 || x.get<int64_t>() == 1)) {
      out.push_back(static_cast<uint8_t>(x.get<int64_t>()));
    } else {
      throw Error(where, field + "[" + std::to_string(i) + "]",
                  "is " + json_preview(x) + ", expected 0 or 1");
    }
  }
  return out;
}

}  // namespace

AdvantagesRequest parse_advantages_request(const std::string& text, const std::string& where) {
  // The shared reader: depth limit, duplicate keys, short syntax errors (engine/json_reader.h).
  json doc = read_json(text, where);
  if (!doc.is_object()) throw Error(where, "", "expected a JSON object at the top level");
  reject_unknown(doc,
                 {"gamma", "lambda", "lambda_alpha", "correction", "correction_segments", "critic_target",
                  "summary_loss_masked", "whiten", "positive_only", "rollouts"},
                 where, "");
  AdvantagesRequest req;
  LearnerOptions& o = req.options;
  if (doc.contains("gamma")) o.gamma = number(doc["gamma"], where, "gamma");
  if (doc.contains("lambda")) {
    const json& l = doc["lambda"];
    if (l.is_string()) {
      const std::string name = l.get<std::string>();
      if (name == "adaptive") {
        o.lambda_mode = LambdaMode::kAdaptive;
      } else if (name == "tokenwise") {
        o.lambda_mode = LambdaMode::kTokenwise;
      } else {
        throw Error(where, "lambda",
                    "is " + quote(text_prefix(name)) + ", expected \"adaptive\", \"tokenwise\" or a number");
      }
    } else if (l.is_number()) {
      o.lambda_mode = LambdaMode::kFixed;
      o.lambda = number(l, where, "lambda");
    } else {
      throw Error(where, "lambda",
                  "is a " + type_of(l) + ", expected \"adaptive\", \"tokenwise\" or a number");
    }
  }
  if (doc.contains("lambda_alpha")) o.lambda_alpha = number(doc["lambda_alpha"], where, "lambda_alpha");
  if (doc.contains("correction")) o.correction = boolean(doc["correction"], where, "correction");
  if (doc.contains("correction_segments")) {
    const json& c = doc["correction_segments"];
    if (!c.is_string())
      throw Error(where, "correction_segments", "is a " + type_of(c) + ", expected a string");
    o.correction_segments =
        parse_correction_segments(text_prefix(c.get<std::string>()), where, "correction_segments");
  }
  if (doc.contains("critic_target")) {
    const json& c = doc["critic_target"];
    if (!c.is_string()) throw Error(where, "critic_target", "is a " + type_of(c) + ", expected a string");
    o.critic_target = parse_critic_target(c.get<std::string>(), where, "critic_target");
  }
  if (doc.contains("summary_loss_masked"))
    o.summary_loss_masked = boolean(doc["summary_loss_masked"], where, "summary_loss_masked");
  if (doc.contains("whiten")) o.whiten_advantages = boolean(doc["whiten"], where, "whiten");
  if (doc.contains("positive_only")) o.positive_only = boolean(doc["positive_only"], where, "positive_only");
  validate_options(o, where);

  const json& rollouts = require(doc, "rollouts", where, "");
  if (!rollouts.is_array())
    throw Error(where, "rollouts", "is a " + type_of(rollouts) + ", expected an array");
  Batch& b = req.batch;
  for (size_t r = 0; r < rollouts.size(); ++r) {
    const std::string rpath = "rollouts[" + std::to_string(r) + "]";
    const json& ro = rollouts[r];
    if (!ro.is_object()) throw Error(where, rpath, "is a " + type_of(ro) + ", expected an object");
    reject_unknown(ro, {"id", "reward", "segments"}, where, rpath + ".");
    std::string id;
    if (ro.contains("id")) {
      if (!ro["id"].is_string())
        throw Error(where, rpath + ".id", "is a " + type_of(ro["id"]) + ", expected a string");
      id = ro["id"].get<std::string>();
    }
    b.begin_rollout(number(require(ro, "reward", where, rpath + "."), where, rpath + ".reward"), id);
    const json& segments = require(ro, "segments", where, rpath + ".");
    if (!segments.is_array()) {
      throw Error(where, rpath + ".segments", "is a " + type_of(segments) + ", expected an array");
    }
    for (size_t s = 0; s < segments.size(); ++s) {
      const std::string spath = rpath + ".segments[" + std::to_string(s) + "]";
      const json& so = segments[s];
      if (!so.is_object()) throw Error(where, spath, "is a " + type_of(so) + ", expected an object");
      reject_unknown(so, {"kind", "values", "actor_mask", "critic_mask"}, where, spath + ".");
      const json& kind = require(so, "kind", where, spath + ".");
      SegmentKind k;
      if (kind == "execution") {
        k = SegmentKind::kExecution;
      } else if (kind == "summary") {
        k = SegmentKind::kSummary;
      } else {
        throw Error(where, spath + ".kind",
                    "is " + json_preview(kind) + ", expected \"execution\" or \"summary\"");
      }
      const std::vector<double> values =
          number_array(require(so, "values", where, spath + "."), where, spath + ".values");
      const std::vector<uint8_t> actor =
          mask_array(require(so, "actor_mask", where, spath + "."), where, spath + ".actor_mask");
      const std::vector<uint8_t> critic =
          so.contains("critic_mask") ? mask_array(so["critic_mask"], where, spath + ".critic_mask") : actor;
      if (actor.size() != values.size()) {
        throw Error(where, spath + ".actor_mask",
                    "has " + std::to_string(actor.size()) + " entries but values has " +
                        std::to_string(values.size()) + "; expected one per response token");
      }
      if (critic.size() != values.size()) {
        throw Error(where, spath + ".critic_mask",
                    "has " + std::to_string(critic.size()) + " entries but values has " +
                        std::to_string(values.size()) + "; expected one per response token");
      }
      b.add_segment(k, values, actor, critic);
    }
  }
  b.validate();
  return req;
}

namespace {

json finite_or_null(double x) {
  return std::isfinite(x) ? json(x) : json(nullptr);
}

}  // namespace

std::string format_advantages_result(const AdvantagesRequest& request, const Advantages& adv,
                                     const Diagnostics& diagnostics) {
  const LearnerOptions& o = request.options;
  const Batch& b = request.batch;
  json doc;
  doc["gamma"] = o.gamma;
  doc["lambda"] = o.lambda_mode == LambdaMode::kFixed ? json(o.lambda)
                                                      : json(std::string(lambda_mode_name(o.lambda_mode)));
  doc["lambda_alpha"] = o.lambda_alpha;
  doc["correction"] = o.correction;
  doc["correction_segments"] = std::string(correction_segments_name(o.correction_segments));
  doc["critic_target"] = std::string(critic_target_name(o.critic_target));
  doc["summary_loss_masked"] = o.summary_loss_masked;
  doc["whiten"] = o.whiten_advantages;
  doc["positive_only"] = o.positive_only;
  json rollouts = json::array();
  for (int64_t r = 0; r < b.num_rollouts(); ++r) {
    json ro;
    if (!b.rollout_ids[r].empty()) ro["id"] = b.rollout_ids[r];
    ro["reward"] = b.rewards[r];
    json segments = json::array();
    for (int64_t s = b.rollout_offsets[r]; s < b.rollout_offsets[r + 1]; ++s) {
      const int64_t begin = b.segment_offsets[s], end = b.segment_offsets[s + 1];
      json so;
      so["kind"] = std::string(segment_kind_name(b.segment_kind[s]));
      so["values"] = std::vector<double>(b.values.begin() + begin, b.values.begin() + end);
      so["actor_mask"] = std::vector<int>(b.actor_mask.begin() + begin, b.actor_mask.begin() + end);
      so["critic_mask"] = std::vector<int>(b.critic_mask.begin() + begin, b.critic_mask.begin() + end);
      so["advantages"] = std::vector<double>(adv.advantages.begin() + begin, adv.advantages.begin() + end);
      so["returns"] = std::vector<double>(adv.returns.begin() + begin, adv.returns.begin() + end);
      so["n_sampled"] = adv.n_sampled[s];
      so["n_after"] = adv.n_after[s];
      so["lambda"] = adv.lambda[s];
      so["factor"] = adv.factor[s];
      segments.push_back(std::move(so));
    }
    ro["segments"] = std::move(segments);
    rollouts.push_back(std::move(ro));
  }
  doc["rollouts"] = std::move(rollouts);
  json diag;
  const char* kinds[2] = {"execution", "summary"};
  json gaps;
  for (int from = 0; from < 2; ++from) {
    for (int to = 0; to < 2; ++to) {
      const BoundaryGap& g = diagnostics.gap[from][to];
      if (g.count == 0) continue;
      gaps[std::string(kinds[from]) + "->" + kinds[to]] = {
          {"count", g.count}, {"mean", g.mean}, {"mean_abs", g.mean_abs}};
    }
  }
  diag["boundary_value_gap"] = gaps.is_null() ? json::object() : gaps;
  diag["explained_variance"] = finite_or_null(diagnostics.explained_variance);
  for (int k = 0; k < 2; ++k) {
    diag["explained_variance_by_kind"][kinds[k]] = finite_or_null(diagnostics.explained_variance_by_kind[k]);
  }
  doc["diagnostics"] = std::move(diag);
  return doc.dump(2) + "\n";
}

}  // namespace crl::learners
