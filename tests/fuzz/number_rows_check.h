#pragma once
// What JsonNumberRows and unread arrays (engine/json_view.h) promise, checked on one text: read plainly and
// with the rows (and the unread arrays' keys), the text is accepted or refused alike, with the same error;
// an accepted one has the same values, each taken array's in its rows (written back as the array they came
// from) and stored as one unread node, each unread array's in its text.
// Used by the JSON reader's differential test and the upstream_answer fuzz target.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
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

// Whether `v` is an array a parse stored unread for `unread_arrays` (its key is one of them, and reading it
// throws std::logic_error).
inline bool stored_unread(JsonView v, std::span<const std::string_view> unread_arrays) {
  if (!v.is_array() || std::find(unread_arrays.begin(), unread_arrays.end(), v.key()) == unread_arrays.end())
    return false;
  try {
    (void)v.size();
  } catch (const std::logic_error&) {
    return true;
  }
  return false;
}

// The document as nlohmann's DOM, a taken array written back from its rows (their cells, and the nulls),
// an array stored unread read from its text.
inline nlohmann::json expand_rows(JsonView v, std::span<const JsonNumberRows> rows,
                                  std::span<const std::string_view> unread_arrays = {}) {
  if (stored_unread(v, unread_arrays))
    return JsonDocument::parse(v.raw(), "an unread array", kMaxJsonDepth).root().to_json();
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
    for (const JsonView e : v) out.push_back(expand_rows(e, rows, unread_arrays));
    return out;
  }
  if (v.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const JsonView m : v) out[std::string(m.key())] = expand_rows(m, rows, unread_arrays);
    return out;
  }
  return v.to_json();
}

struct RowsReading {
  std::string difference;  // empty: the two reads agree
  bool accepted = false;
  int taken = 0;   // arrays the rows took
  int unread = 0;  // arrays stored unread for `unread_arrays`
};

// The number of arrays in the document stored unread for `unread_arrays`.
inline int count_unread(JsonView v, std::span<const std::string_view> unread_arrays) {
  if (stored_unread(v, unread_arrays)) return 1;
  int count = 0;
  try {
    if (v.is_array() || v.is_object())
      for (const JsonView e : v) count += count_unread(e, unread_arrays);
  } catch (const std::logic_error&) {  // a JsonNumberRows' array
  }
  return count;
}

// `unread_arrays` (JsonDocument::parse's): asked with the rows, and the same holds of them.
inline RowsReading read_with_and_without_rows(std::string_view text, std::span<JsonNumberRows> rows,
                                              int max_depth,
                                              std::span<const std::string_view> unread_arrays = {}) {
  RowsReading out;
  std::optional<JsonDocument> plain, with;
  std::string plain_error, with_error;
  try {
    plain = JsonDocument::parse(text, "test", max_depth);
  } catch (const JsonError& e) {
    plain_error = e.what();
  }
  try {
    with = JsonDocument::parse(text, "test", max_depth, nullptr, rows, unread_arrays);
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
  const std::string expanded = expand_rows(with->root(), rows, unread_arrays).dump(),
                    read = plain->root().to_json().dump();
  out.unread = count_unread(with->root(), unread_arrays);
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
