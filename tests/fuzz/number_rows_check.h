#pragma once
// What JsonNumberRows (engine/json_view.h) promises, checked on one text: read plainly and with the rows,
// the text is accepted or refused alike, with the same error; an accepted one has the same values, each
// taken array's in its rows (written back as the array they came from) and stored as one unread node.
// Used by the JSON reader's differential test and the upstream_answer fuzz target.
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/json_view.h"

namespace crl::testing {

inline nlohmann::json number_json(const JsonNumber& n) {
  switch (n.kind) {
    case JsonNumberKind::kUnsigned:
      return nlohmann::json(n.value.u);
    case JsonNumberKind::kSigned:
      return nlohmann::json(n.value.i);
    case JsonNumberKind::kFloat:
      break;
  }
  return nlohmann::json(n.value.d);
}

// The document as nlohmann's DOM, a taken array written back from its rows (their cells, and the nulls).
inline nlohmann::json expand_rows(JsonView v, std::span<const JsonNumberRows> rows) {
  for (const JsonNumberRows& r : rows) {
    if (!r.taken(v)) continue;
    if (r.matched) return nlohmann::json::parse(r.expected);  // the caller's own text: its values
    nlohmann::json out = nlohmann::json::array();
    const size_t width = r.bracketed ? static_cast<size_t>(r.numbers) : 1;
    for (size_t row = 0; row < r.rows(); ++row) {
      if (!r.bracketed) {
        out.push_back(number_json(r.cells[row]));
        continue;
      }
      nlohmann::json entry = nlohmann::json::array();
      for (size_t k = 0; k < width; ++k) entry.push_back(number_json(r.cells[row * width + k]));
      for (int k = 0; k < r.nulls; ++k) entry.push_back(nullptr);
      out.push_back(entry);
    }
    return out;
  }
  if (v.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const JsonView e : v) out.push_back(expand_rows(e, rows));
    return out;
  }
  if (v.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const JsonView m : v) out[std::string(m.key())] = expand_rows(m, rows);
    return out;
  }
  return v.to_json();
}

struct RowsReading {
  std::string difference;  // empty: the two reads agree
  bool accepted = false;
  int taken = 0;  // arrays the rows took
};

inline RowsReading read_with_and_without_rows(std::string_view text, std::span<JsonNumberRows> rows,
                                              int max_depth) {
  RowsReading out;
  std::optional<JsonDocument> plain, with;
  std::string plain_error, with_error;
  try {
    plain = JsonDocument::parse(text, "test", max_depth);
  } catch (const JsonError& e) {
    plain_error = e.what();
  }
  try {
    with = JsonDocument::parse(text, "test", max_depth, nullptr, rows);
  } catch (const JsonError& e) {
    with_error = e.what();
  }
  if (plain.has_value() != with.has_value() || plain_error != with_error) {
    out.difference = "plain: " + (plain ? std::string("accepted") : plain_error) +
                     "; with rows: " + (with ? std::string("accepted") : with_error);
    return out;
  }
  if (!plain) return out;
  out.accepted = true;
  const std::string expanded = expand_rows(with->root(), rows).dump(), read = plain->root().to_json().dump();
  if (expanded != read) {
    out.difference = "values differ: " + expanded.substr(0, 200) + " against " + read.substr(0, 200);
    return out;
  }
  for (const JsonNumberRows& r : rows) {
    if (r.text.empty()) continue;
    ++out.taken;
    bool unread = false;  // its node: unread, its text the array's
    for (const JsonDocument::Node& node : with->nodes())
      unread |= node.unread && node.text == r.text.data() && node.text_size == r.text.size();
    if (!unread) out.difference = "a taken array is not one unread node";
  }
  return out;
}

}  // namespace crl::testing
