#pragma once
// A parsed Jinja template (the subset that chat templates use: engine/README.md). Parse once, render many
// times; rendering is const and safe from many threads (each render has its own interpreter).
//
//   const auto t = jinja::Template::parse(source, "qwen3/tokenizer_config.json");
//   jinja::Dict vars;
//   vars.set("messages", jinja::from_json(messages));
//   std::string text = t.render(vars, now_unix);
//
// Errors are jinja::TemplateError (a crl::Error) naming the template and the line.
#include <memory>
#include <string>
#include <string_view>

#include "engine/jinja/ast.h"
#include "engine/jinja/interpreter.h"
#include "engine/jinja/value.h"

namespace crl::jinja {

class Template {
 public:
  static Template parse(std::string_view source, std::string name, Limits limits = {});
  // `now_unix`: the time strftime_now() formats (UTC seconds).
  std::string render(const Dict& variables, int64_t now_unix = 0) const;
  const std::string& name() const { return *name_; }

 private:
  Template() = default;
  std::shared_ptr<const std::string> name_;
  std::shared_ptr<const Body> body_;
  Limits limits_;
};

}  // namespace crl::jinja
