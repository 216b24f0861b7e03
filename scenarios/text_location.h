#pragma once
// Locating errors in protobuf text-format files (scenario files, the compaction-cost study): the parser's
// first error, field paths such as "arm[1].set.budget.capacity", and "file:line:column" of a field that the
// file wrote, read from the parser's location tree.
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <string>
#include <vector>

namespace crl::scenarios {

// Collects the text parser's errors; the first one is kept (protobuf stops at it anyway).
class FirstErrorCollector final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override;
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  bool found() const { return found_; }
  int line() const { return line_; }      // from 1, as editors count
  int column() const { return column_; }  // from 1
  const std::string& message() const { return message_; }

 private:
  bool found_ = false;
  int line_ = 0, column_ = 0;
  std::string message_;
};

// One step of a field path: a field name and an index (-1 for a singular field).
struct PathStep {
  std::string field;
  int index = -1;
};
using FieldPath = std::vector<PathStep>;

// "a.b[2].c"
std::string path_name(const FieldPath& path);

// Parses `text` (the file `path`) into `out`, recording field locations into `tree`. A syntax error or an
// unknown field throws crl::Error("path:line:column", field named by protobuf's message, message); an
// unknown field is located at its name (protobuf reports the token after it). `what` names the kind of file
// when protobuf gives no message ("not a valid <what>").
void parse_text_file(const std::string& text, const std::string& path, const std::string& what,
                     google::protobuf::Message& out, google::protobuf::TextFormat::ParseInfoTree& tree);

// Locates fields of one parsed file.
class TextLocator {
 public:
  TextLocator(std::string file, const google::protobuf::Descriptor* root,
              const google::protobuf::TextFormat::ParseInfoTree& tree)
      : file_(std::move(file)), root_(root), tree_(tree) {}
  // "file:line:column" of the field at `path` when the file wrote it, else "file".
  std::string where(const FieldPath& path) const;
  // Throws crl::Error(where(path), path_name(path), message).
  [[noreturn]] void fail(const FieldPath& path, const std::string& message) const;
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  const google::protobuf::Descriptor* root_;
  const google::protobuf::TextFormat::ParseInfoTree& tree_;
};

}  // namespace crl::scenarios
