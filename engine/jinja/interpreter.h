#pragma once
// The evaluator: runs a parsed template over a set of variables and returns the text, with jinja2's
// semantics as Hugging Face configures it (an ImmutableSandboxedEnvironment with loopcontrols):
//  * scopes: a for-loop iteration and a macro call have their own scope (a `set` there does not leak out;
//    a read falls back to the enclosing scope); `if` has none; namespace() objects are shared, so
//    `set ns.x = ...` is how a template carries state out of a loop;
//  * undefined values: printing gives "", iterating gives nothing, `is defined` is false, `length` is 0;
//    attribute access, subscripts, calls, arithmetic and tojson on an undefined value are errors
//    (kUndefined);
//  * sandbox: list methods that mutate (append, pop, ...) do not exist.
// Limits make hostile templates fail with a typed error (kLimit) naming the line, never crash or hang.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/jinja/ast.h"
#include "engine/jinja/template_error.h"
#include "engine/jinja/value.h"

namespace crl::jinja {

struct Limits {
  size_t max_output_bytes = 16u << 20;  // the rendered text, and any one string or list a template builds
  int max_call_depth = 100;             // nested macro calls (recursion)
  // for-loop iterations, range() items and macro calls in one render (a macro that calls itself twice
  // makes 2^depth calls within max_call_depth). Real templates can be quadratic in the conversation:
  // gpt-oss's loops over the rest of the conversation at every assistant tool call, a million iterations
  // at a thousand tool calls, which a long-horizon harness's history reaches (the gateway renders it whole).
  uint64_t max_loop_iterations = 20'000'000;
  int max_nesting = 200;  // nested blocks and expressions in the source
  // The work of one render, in bytes: every string a template builds (concatenations, filter and method
  // results, slices, its output) counts its length, every list or dict it builds 64 per item, every macro
  // call 1024, and every comparison or `in` the lengths of the strings (the items of the lists and dicts)
  // it reads. The other
  // limits bound how many steps and how large a value, not their product: a template that copies a growing
  // string in a loop, or compares long strings in one, is quadratic and ran for hours within them. Real chat
  // templates do 3-5 times their output's length of such work on ordinary conversations; gpt-oss's slices
  // of the rest of the conversation grow with the square of its tool calls and reach the limit between
  // three and four thousand.
  uint64_t max_work_bytes = uint64_t{1} << 30;
  // A wall-clock backstop for work the counts above do not see, checked every 256 iterations or calls and
  // every 16 MB of work; it ends only renders that no real template comes near.
  double max_render_seconds = 10;
};

class Interpreter {
 public:
  // `now_unix` is the time strftime_now() formats (UTC).
  Interpreter(const std::string& template_name, const Limits& limits, int64_t now_unix);

  // Renders `body` with `variables` (messages, tools, add_generation_prompt, bos_token, ...).
  std::string render(const Body& body, const Dict& variables);

  // For the builtins: raise a typed error at the line being evaluated.
  [[noreturn]] void fail(ErrorKind kind, const std::string& message) const;
  // Checks the size of a string or list a template builds (kLimit when over max_output_bytes).
  void check_size(size_t size, const char* what) const;
  // Counts items produced by a loop or range(), and macro calls, against max_loop_iterations.
  void count_iterations(uint64_t n);
  // Counts work against max_work_bytes: `bytes` built, copied or compared. (Inline: it runs at every
  // comparison and filter of a render; the checks run when the work passes a mark.)
  void charge(uint64_t bytes) {
    work_ += bytes;
    if (work_ >= next_work_check_) [[unlikely]]
      passed_a_work_check();
  }
  // The work of copying one item of a list or dict: a value with a reference count to raise (a loop that
  // copies a growing list ran about ten times longer per item than one copying a string per byte).
  static constexpr uint64_t kWorkPerItem = 64;
  // charge() of a value built: a string's bytes, kWorkPerItem per item of a list or dict.
  void charge_built(const Value& v) { charge_value(v, kWorkPerItem); }
  // charge() of a value read whole (compared, searched): a string's bytes, a list's or dict's items.
  void charge_read(const Value& v) { charge_value(v, 1); }
  const Limits& limits() const { return limits_; }
  int64_t now_unix() const { return now_unix_; }
  // For namespace(): a namespace made during this render, whose attributes are cleared when it ends (a
  // namespace can hold itself, or a macro whose scope holds it: cycles of shared pointers).
  void adopt_namespace(const Value& made) { namespaces_.push_back(made); }
  // Calls a callable value (a macro, a global, a method) with already evaluated arguments.
  Value call(const Value& callee, const CallArgs& args);
  // Renders a macro body in a fresh scope (used by the macro values this interpreter creates).
  struct Scope;
  Value call_macro(const Node& macro, const std::shared_ptr<Scope>& closure, const CallArgs& args,
                   const Value& caller);

  enum class Flow { kNormal, kBreak, kContinue };

 private:
  Flow exec_body(const Body& body);
  Flow exec(const Node& node);
  void exec_for(const Node& node);
  void exec_set(const Node& node);
  Value eval(const Expr& e);
  Value eval_node(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_filter(const Expr& e);
  bool eval_test(const Expr& e);
  CallArgs eval_args(const Expr& e, size_t first);
  Value lookup(const std::string& name) const;
  // Where `name` is stored (a scope, the variables, the globals); null when it is not defined.
  const Value* find_name(const std::string& name) const;
  void assign(const std::string& name, Value value);
  void write(const std::string& text);
  // Ends a render: clears the scopes that macros closed over, their enclosing scopes and the namespaces
  // made during the render (breaking their reference cycles).
  void release_closures();

  const std::string& name_;
  Limits limits_;
  int64_t now_unix_;
  std::shared_ptr<Scope> scope_;
  std::vector<std::shared_ptr<Scope>> closures_;  // scopes a macro or caller() was defined in
  std::vector<Value> namespaces_;                 // made by namespace() in this render
  const Dict* variables_ = nullptr;
  Dict globals_;
  std::vector<std::string> outputs_;  // a stack: macros and block sets capture their output
  int line_ = 1;
  int call_depth_ = 0;
  uint64_t iterations_ = 0;
  uint64_t work_ = 0;
  uint64_t next_work_check_ = 0;  // the work at which the limit and the clock are checked next
  std::chrono::steady_clock::time_point deadline_;
  // kLimit when the render has run past max_render_seconds.
  void check_clock() const;
  // kLimit past max_work_bytes; else the clock, and the next mark.
  void passed_a_work_check();
  // The first work over the limit (saturating: a limit of UINT64_MAX is none).
  uint64_t past_the_work_limit() const {
    return limits_.max_work_bytes + (limits_.max_work_bytes < UINT64_MAX ? 1 : 0);
  }
  void charge_value(const Value& v, uint64_t per_item) {
    if (v.is_string()) {
      charge(v.as_string().size());
    } else if (v.is_list()) {
      charge(v.as_list().size() * per_item);
    } else if (v.is_dict()) {
      charge(v.as_dict().items.size() * per_item);
    }
  }
};

// The names a loop iteration, a macro call or the template sets: few per scope, so a flat list searched
// linearly (cheaper than hashing the name at every lookup, and a loop can clear and reuse it).
struct Interpreter::Scope {
  Dict vars;
  std::shared_ptr<Scope> parent;
};

}  // namespace crl::jinja
