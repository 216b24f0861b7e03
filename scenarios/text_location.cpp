#include "scenarios/text_location.h"

#include <algorithm>

#include "engine/error.h"

namespace crl::scenarios {

namespace pb = google::protobuf;

void FirstErrorCollector::AddError(int line, pb::io::ColumnNumber column, const std::string& message) {
  if (found_) return;
  found_ = true;
  line_ = line + 1;  // protobuf counts from 0; editors from 1
  column_ = column + 1;
  message_ = message;
}

std::string path_name(const FieldPath& path) {
  std::string out;
  for (const PathStep& step : path) {
    if (!out.empty()) out += '.';
    out += step.field;
    if (step.index >= 0) out += "[" + std::to_string(step.index) + "]";
  }
  return out;
}

void parse_text_file(const std::string& text, const std::string& path, const std::string& what,
                     pb::Message& out, pb::TextFormat::ParseInfoTree& tree) {
  FirstErrorCollector errors;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  if (parser.ParseFromString(text, &out)) return;
  if (!errors.found()) throw Error(path, "", "not a valid " + what);
  // protobuf's messages name the field ("Message type \"crl.proto.scenario.Setup\" has no field named
  // \"enviroment\".") or the expected token; the field is what the message names.
  std::string field;
  for (const std::string marker : {"has no field named \"", "for field \""}) {
    if (const size_t at = errors.message().find(marker); at != std::string::npos && field.empty()) {
      const size_t begin = at + marker.size();
      field = errors.message().substr(begin, errors.message().find('"', begin) - begin);
    }
  }
  // protobuf reports an unknown field at the token after its name; point at the name itself.
  int column = errors.column();
  if (!field.empty()) {
    size_t begin = 0;
    for (int line = 1; line < errors.line() && begin != std::string::npos; ++line) {
      begin = text.find('\n', begin);
      if (begin != std::string::npos) ++begin;
    }
    if (begin != std::string::npos) {
      const std::string line = text.substr(begin, text.find('\n', begin) - begin);
      const size_t at = line.rfind(field, static_cast<size_t>(std::max(column - 1, 0)));
      if (at != std::string::npos) column = static_cast<int>(at) + 1;
    }
  }
  throw Error(path + ":" + std::to_string(errors.line()) + ":" + std::to_string(column), field,
              errors.message());
}

std::string TextLocator::where(const FieldPath& path) const {
  const pb::Descriptor* descriptor = root_;
  const pb::TextFormat::ParseInfoTree* tree = &tree_;
  for (size_t i = 0; i < path.size(); ++i) {
    const pb::FieldDescriptor* field = descriptor->FindFieldByName(path[i].field);
    CRL_CHECK(field != nullptr, "no field " << path[i].field << " in " << descriptor->full_name());
    // The last step, a map (its entries have no nested tree of their own), or a scalar: its location.
    if (i + 1 == path.size() || field->is_map() || field->message_type() == nullptr) {
      const auto location = tree->GetLocation(field, field->is_repeated() ? std::max(path[i].index, 0) : -1);
      if (location.line < 0) return file_;
      return file_ + ":" + std::to_string(location.line + 1) + ":" + std::to_string(location.column + 1);
    }
    tree = tree->GetTreeForNested(field, path[i].index);
    if (tree == nullptr) return file_;
    descriptor = field->message_type();
  }
  return file_;
}

void TextLocator::fail(const FieldPath& path, const std::string& message) const {
  throw Error(where(path), path_name(path), message);
}

}  // namespace crl::scenarios
