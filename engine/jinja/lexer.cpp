#include "engine/jinja/lexer.h"

#include <cctype>
#include <cstdint>

#include "engine/jinja/template_error.h"
#include "engine/python_escape.h"
#include "engine/unicode_data.h"

namespace crl::jinja {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

class Lexer {
 public:
  Lexer(std::string_view raw, const std::string& name) : name_(name) {
    // jinja2 splits the source into lines on \r\n, \r, \n, drops a final empty line, joins with \n.
    source_.reserve(raw.size());
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '\r') {
        source_ += '\n';
        if (k + 1 < raw.size() && raw[k + 1] == '\n') ++k;
      } else {
        source_ += raw[k];
      }
    }
    if (!source_.empty() && source_.back() == '\n') source_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;  // the text to come starts a line (for lstrip_blocks)
    while (pos_ < source_.size()) {
      const size_t tag = next_tag(pos_);
      std::string text = source_.substr(pos_, (tag == std::string::npos ? source_.size() : tag) - pos_);
      if (tag == std::string::npos) {
        emit_text(std::move(text));
        pos_ = source_.size();
        break;
      }
      const char kind = source_[tag + 1];  // '{', '%' or '#'
      const char modifier = tag + 2 < source_.size() ? source_[tag + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && modifier != '+') {
        // lstrip_blocks: only spaces and tabs between the start of the line and the tag.
        const size_t newline = text.rfind('\n');
        const size_t line_begin = newline == std::string::npos ? 0 : newline + 1;
        if (line_begin > 0 || line_starting) {
          bool blank = line_begin < text.size();
          for (size_t k = line_begin; k < text.size() && blank; ++k) blank = is_space(text[k]);
          if (blank) text.resize(line_begin);
        }
      }
      line_ += count_newlines(pos_, tag);
      emit_text(std::move(text));
      pos_ = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#') {
        line_starting = comment();
      } else {
        line_starting = tag_body(kind);
      }
    }
    tokens_.push_back(Token{Token::Type::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw TemplateError(ErrorKind::kSyntax, name_, line_, message);
  }

  size_t next_tag(size_t from) const {
    for (size_t k = source_.find('{', from); k != std::string::npos; k = source_.find('{', k + 1)) {
      if (k + 1 < source_.size() && (source_[k + 1] == '{' || source_[k + 1] == '%' || source_[k + 1] == '#'))
        return k;
    }
    return std::string::npos;
  }

  int count_newlines(size_t from, size_t to) const {
    int n = 0;
    for (size_t k = from; k < to; ++k) n += source_[k] == '\n';
    return n;
  }

  void emit_text(std::string text) {
    if (!text.empty()) tokens_.push_back(Token{Token::Type::kText, std::move(text), line_});
  }

  // After a closing "-}}"/"-%}"/"-#}" all whitespace goes; after "%}"/"#}" one newline (trim_blocks).
  // Returns whether the text that follows starts a line.
  bool after_close(bool strip, bool block) {
    const size_t start = pos_;
    if (strip) {
      while (pos_ < source_.size() && is_space(source_[pos_])) ++pos_;
    } else if (block && pos_ < source_.size() && source_[pos_] == '\n') {
      ++pos_;
    }
    line_ += count_newlines(start, pos_);
    return pos_ > start && source_[pos_ - 1] == '\n';
  }

  bool comment() {
    const size_t end = source_.find("#}", pos_);
    if (end == std::string::npos) fail("unclosed comment: \"{#\" without \"#}\"");
    const bool strip = end > pos_ && source_[end - 1] == '-';
    line_ += count_newlines(pos_, end);
    pos_ = end + 2;
    return after_close(strip, true);
  }

  // The tokens of a "{{ ... }}" or "{% ... %}" tag, then its closing.
  bool tag_body(char kind) {
    const char close = kind == '{' ? '}' : '%';
    tokens_.push_back(Token{kind == '{' ? Token::Type::kVariableBegin : Token::Type::kBlockBegin, "", line_});
    int depth = 0;  // open brackets: a closing "}}" inside them is two braces
    while (true) {
      while (pos_ < source_.size() && is_space(source_[pos_])) {
        line_ += source_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= source_.size()) fail(std::string("unclosed tag: missing \"") + close + "}\"");
      const char c = source_[pos_];
      if (depth == 0) {
        const bool dash =
            c == '-' && pos_ + 2 < source_.size() && source_[pos_ + 1] == close && source_[pos_ + 2] == '}';
        if (dash || (c == close && pos_ + 1 < source_.size() && source_[pos_ + 1] == '}')) {
          tokens_.push_back(
              Token{kind == '{' ? Token::Type::kVariableEnd : Token::Type::kBlockEnd, "", line_});
          pos_ += dash ? 3 : 2;
          return after_close(dash, kind == '%');
        }
      }
      if (is_name_start(c)) {
        const size_t start = pos_;
        while (pos_ < source_.size() && (is_name_start(source_[pos_]) || is_digit(source_[pos_]))) ++pos_;
        tokens_.push_back(Token{Token::Type::kName, source_.substr(start, pos_ - start), line_});
      } else if (is_digit(c)) {
        number();
      } else if (c == '\'' || c == '"') {
        string_literal(c);
      } else {
        static const char* const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                                 "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                                 "]",  "{",  "}",  ",",  ".",  ":",  "|"};
        std::string op;
        for (const char* o : kOperators) {
          if (source_.compare(pos_, std::char_traits<char>::length(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op.empty()) fail("unexpected character " + std::string(1, c) + " in a tag");
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        tokens_.push_back(Token{Token::Type::kOperator, op, line_});
        pos_ += op.size();
      }
    }
  }

  void number() {
    const size_t start = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (pos_ < source_.size() && (is_digit(source_[pos_]) || source_[pos_] == '_')) ++pos_;
    };
    digits();
    if (pos_ + 1 < source_.size() && source_[pos_] == '.' && is_digit(source_[pos_ + 1])) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < source_.size() && (source_[pos_] == 'e' || source_[pos_] == 'E')) {
      size_t k = pos_ + 1;
      if (k < source_.size() && (source_[k] == '+' || source_[k] == '-')) ++k;
      if (k < source_.size() && is_digit(source_[k])) {
        is_float = true;
        pos_ = k;
        digits();
      }
    }
    std::string text;
    for (size_t k = start; k < pos_; ++k) {
      if (source_[k] != '_') text += source_[k];
    }
    tokens_.push_back(Token{is_float ? Token::Type::kFloat : Token::Type::kInteger, text, line_});
  }

  // A Python string literal, decoded as jinja2 decodes it (unicode-escape): \n \t \r \\ \' \" \a \b \f \v,
  // octal, \xhh, \uXXXX, \UXXXXXXXX; an unknown escape keeps its backslash.
  void string_literal(char quote) {
    const int start_line = line_;
    std::string out;
    ++pos_;
    while (true) {
      if (pos_ >= source_.size()) {
        line_ = start_line;
        fail("unclosed string literal");
      }
      const char c = source_[pos_++];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= source_.size()) continue;
      if (source_[pos_] == '\n') ++line_;  // a line continuation
      if (!append_python_escape(source_, pos_, out))
        fail("truncated \\x, \\u or \\U escape in a string literal");
    }
    tokens_.push_back(Token{Token::Type::kString, std::move(out), start_line});
  }

  std::string source_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& template_name) {
  return Lexer(source, template_name).run();
}

}  // namespace crl::jinja
