#include "engine/jinja/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "engine/jinja/builtins.h"

namespace crl::jinja {

namespace {

// A macro as a value: calling it renders its body in a scope whose parent is where it was defined (so it
// sees the template's variables as they are at call time, as jinja2 macros do).
class Macro final : public Callable {
 public:
  Macro(const Node& node, std::shared_ptr<Interpreter::Scope> closure, Value caller)
      : node_(node), closure_(std::move(closure)), caller_(std::move(caller)) {}
  std::string name() const override { return "macro " + node_.text; }
  Value call(const CallArgs& args, Interpreter& in) const override {
    return in.call_macro(node_, closure_, args, caller_);
  }

 private:
  const Node& node_;
  std::shared_ptr<Interpreter::Scope> closure_;
  Value caller_;
};

// How much work (Limits::max_work_bytes) runs between two reads of the clock.
constexpr uint64_t kWorkPerClockCheck = 16u << 20;
// The work of a macro call (a scope, an output buffer, its arguments bound): about what copying a kilobyte
// costs. A macro that calls itself twice is out of work after a million calls (half a second), where the
// iteration limit alone let it run into the clock; real templates call macros per tool parameter.
constexpr uint64_t kWorkPerCall = 1024;

bool checked_add(int64_t a, int64_t b, int64_t& out) {
  return !__builtin_add_overflow(a, b, &out);
}
bool checked_mul(int64_t a, int64_t b, int64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

}  // namespace

Interpreter::Interpreter(const std::string& template_name, const Limits& limits, int64_t now_unix)
    : name_(template_name), limits_(limits), now_unix_(now_unix), globals_(builtin_globals()) {}

std::string Interpreter::render(const Body& body, const Dict& variables) {
  variables_ = &variables;
  scope_ = std::make_shared<Scope>();
  outputs_.assign(1, std::string());
  line_ = 1;
  call_depth_ = 0;
  iterations_ = 0;
  work_ = 0;
  next_work_check_ = std::min(kWorkPerClockCheck, past_the_work_limit());
  deadline_ =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(limits_.max_render_seconds));
  Flow flow;
  try {
    flow = exec_body(body);
  } catch (const std::length_error& e) {  // repr / == / tojson of a value nested too deep (value.h)
    release_closures();
    fail(ErrorKind::kLimit, e.what());
  } catch (...) {
    release_closures();
    throw;
  }
  release_closures();
  if (flow != Flow::kNormal) fail(ErrorKind::kSyntax, "break or continue outside a for loop");
  std::string out = std::move(outputs_.back());
  outputs_.clear();
  return out;
}

void Interpreter::release_closures() {
  // A macro holds the scope it was defined in, and that scope (or a namespace or list in it) holds the
  // macro: a cycle of shared pointers that outlives the render unless broken here (it leaked the whole
  // render's state, ~120 KB per render of gpt-oss's template). The cycle can also run through an enclosing
  // scope (a macro defined in a loop, kept in a namespace set at the top level) or through namespaces alone
  // (`set ns.me = ns`), so every scope up from a closure and every namespace of the render is cleared.
  // Nothing made during a render outlives it (it returns text), so clearing them changes no result.
  for (const std::shared_ptr<Scope>& s : closures_) {
    for (Scope* at = s.get(); at != nullptr; at = at->parent.get()) at->vars.items.clear();
  }
  closures_.clear();
  for (Scope* at = scope_.get(); at != nullptr; at = at->parent.get()) at->vars.items.clear();
  scope_.reset();
  for (const Value& made : namespaces_) made.namespace_attributes().items.clear();
  namespaces_.clear();
}

void Interpreter::fail(ErrorKind kind, const std::string& message) const {
  throw TemplateError(kind, name_, line_, message);
}

void Interpreter::check_size(size_t size, const char* what) const {
  if (size > limits_.max_output_bytes)
    fail(ErrorKind::kLimit, std::string(what) + " larger than the limit of " +
                                std::to_string(limits_.max_output_bytes) + " bytes");
}

void Interpreter::count_iterations(uint64_t n) {
  const uint64_t before = iterations_;
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations)
    fail(ErrorKind::kLimit, "more than " + std::to_string(limits_.max_loop_iterations) +
                                " loop iterations and macro calls in one render");
  if ((before >> 8) != (iterations_ >> 8)) check_clock();
}

void Interpreter::passed_a_work_check() {
  if (work_ > limits_.max_work_bytes)
    fail(ErrorKind::kLimit, "more than " + std::to_string(limits_.max_work_bytes) +
                                " bytes of strings and lists built or compared in one render (a template "
                                "that copies or compares long text in a loop)");
  check_clock();
  next_work_check_ = std::min(work_ + kWorkPerClockCheck, past_the_work_limit());
}

void Interpreter::check_clock() const {
  if (std::chrono::steady_clock::now() > deadline_) {
    std::ostringstream seconds;
    seconds << limits_.max_render_seconds;
    fail(ErrorKind::kLimit, "the render ran longer than " + seconds.str() + " s");
  }
}

void Interpreter::write(const std::string& text) {
  std::string& out = outputs_.back();
  check_size(out.size() + text.size(), "output");
  charge(text.size());
  out += text;
}

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const NodePtr& node : body) {
    const Flow flow = exec(*node);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Node& node) {
  line_ = node.line;
  switch (node.kind) {
    case Node::Kind::kText:
      write(node.text);
      return Flow::kNormal;
    case Node::Kind::kOutput: {
      const Value v = eval(*node.expr);
      write(v.is_string() ? v.as_string() : v.str());  // a string is written without a copy
      return Flow::kNormal;
    }
    case Node::Kind::kIf:
      for (size_t k = 0; k < node.conditions.size(); ++k) {
        if (eval(*node.conditions[k]).truthy()) return exec_body(node.bodies[k]);
      }
      return exec_body(node.else_body);
    case Node::Kind::kFor:
      exec_for(node);
      return Flow::kNormal;
    case Node::Kind::kSet:
      exec_set(node);
      return Flow::kNormal;
    case Node::Kind::kSetBlock: {
      outputs_.emplace_back();
      const Flow flow = exec_body(node.body);
      std::string text = std::move(outputs_.back());
      outputs_.pop_back();
      assign(node.targets[0], Value(std::move(text)));
      return flow;
    }
    case Node::Kind::kMacro:
      closures_.push_back(scope_);
      assign(node.text, Value::callable(std::make_shared<Macro>(node, scope_, Value())));
      return Flow::kNormal;
    case Node::Kind::kCallBlock: {
      // The block's body becomes the macro `caller` (with the block's parameters) of the called macro.
      const Expr& call = *node.expr;
      const Value callee = eval(*call.args[0]);
      CallArgs args = eval_args(call, 1);
      closures_.push_back(scope_);
      args.named.emplace_back("caller", Value::callable(std::make_shared<Macro>(node, scope_, Value())));
      write(this->call(callee, args).str());
      return Flow::kNormal;
    }
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Interpreter::exec_for(const Node& node) {
  const Value iterable = eval(*node.expr);
  if (iterable.is_none() || iterable.is_number() || iterable.is_callable() || iterable.is_namespace())
    fail(ErrorKind::kType, "'" + iterable.type_name() + "' object is not iterable");
  // A list is iterated in place (lists are immutable); strings and dicts become lists first.
  List made;
  const List* items = &made;
  if (iterable.is_list()) {
    items = &iterable.as_list();
  } else {
    made = iterate(*this, iterable);
  }
  const auto parent = scope_;
  // Each iteration has a fresh scope (a `set` in one iteration is not seen by the next, as in jinja2); the
  // Scope object and the `loop` dict are reused when nothing outlived the iteration that held them (a macro
  // defined in the body keeps its scope, `set x = loop` keeps the dict): copy on write. A chat template runs
  // this once per message per loop, and some (gpt-oss) loop over the rest of the conversation per message.
  std::shared_ptr<Scope> frame;
  std::shared_ptr<Dict> loop_dict;
  const auto enter = [&] {
    if (frame && frame.use_count() == 1) {
      frame->vars.items.clear();
    } else {
      frame = std::make_shared<Scope>();
      frame->parent = parent;
    }
    scope_ = frame;
  };
  const auto bind = [&](const Value& item) {
    if (node.targets.size() == 1) {
      scope_->vars.set(node.targets[0], item);
      return;
    }
    const List parts = iterate(*this, item);
    if (parts.size() != node.targets.size())
      fail(ErrorKind::kType, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                                 std::to_string(node.targets.size()) + " loop variables");
    for (size_t k = 0; k < parts.size(); ++k) scope_->vars.set(node.targets[k], parts[k]);
  };
  if (node.condition) {  // `for x in xs if cond`: the filter runs first, loop.length counts what passed
    List kept;
    for (const Value& item : *items) {
      count_iterations(1);
      enter();
      bind(item);
      const bool keep = eval(*node.condition).truthy();
      scope_ = parent;
      if (keep) kept.push_back(item);
    }
    made = std::move(kept);
    items = &made;
  }
  const int64_t n = static_cast<int64_t>(items->size());
  for (int64_t k = 0; k < n; ++k) {
    count_iterations(1);
    enter();
    bind((*items)[static_cast<size_t>(k)]);
    // The keys are distinct: written without Dict::set's lookup, and kept when the dict is reused.
    static const std::string kKeys[] = {"index0", "index", "revindex0", "revindex", "first",   "last",
                                        "length", "depth", "depth0",    "previtem", "nextitem"};
    if (!loop_dict || loop_dict.use_count() != 1) {
      loop_dict = std::make_shared<Dict>();
      loop_dict->items.reserve(11);
      for (size_t key = 0; key < 9; ++key) loop_dict->items.emplace_back(kKeys[key], Value());
    }
    std::vector<std::pair<std::string, Value>>& loop = loop_dict->items;
    loop.resize(9);
    loop[0].second = Value(k);
    loop[1].second = Value(k + 1);
    loop[2].second = Value(n - k - 1);
    loop[3].second = Value(n - k);
    loop[4].second = Value(k == 0);
    loop[5].second = Value(k == n - 1);
    loop[6].second = Value(n);
    loop[7].second = Value(int64_t{1});
    loop[8].second = Value(int64_t{0});
    if (k > 0) loop.emplace_back(kKeys[9], (*items)[static_cast<size_t>(k - 1)]);
    if (k + 1 < n) loop.emplace_back(kKeys[10], (*items)[static_cast<size_t>(k + 1)]);
    scope_->vars.set("loop", Value::shared_dict(loop_dict));
    Flow flow;
    try {
      flow = exec_body(node.body);
    } catch (...) {
      scope_ = parent;
      throw;
    }
    scope_ = parent;
    if (flow == Flow::kBreak) break;
  }
  if (n == 0) exec_body(node.else_body);
}

void Interpreter::exec_set(const Node& node) {
  Value value = eval(*node.expr);
  line_ = node.line;
  if (!node.attribute.empty()) {
    const Value target = lookup(node.targets[0]);
    if (!target.is_namespace())
      fail(ErrorKind::kType, "cannot assign attribute on non-namespace object " + quote(node.targets[0]) +
                                 " (a " + target.type_name() + ")");
    target.namespace_attributes().set(node.attribute, std::move(value));
    return;
  }
  if (node.targets.size() == 1) {
    assign(node.targets[0], std::move(value));
    return;
  }
  const List parts = iterate(*this, value);
  if (parts.size() != node.targets.size())
    fail(ErrorKind::kType, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                               std::to_string(node.targets.size()) + " names");
  for (size_t k = 0; k < parts.size(); ++k) assign(node.targets[k], parts[k]);
}

const Value* Interpreter::find_name(const std::string& name) const {
  for (const Scope* s = scope_.get(); s; s = s->parent.get()) {
    if (const Value* v = s->vars.find(name)) return v;
  }
  if (const Value* v = variables_->find(name)) return v;
  return globals_.find(name);
}

Value Interpreter::lookup(const std::string& name) const {
  if (const Value* v = find_name(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::assign(const std::string& name, Value value) {
  scope_->vars.set(name, std::move(value));
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
  if (callee.is_undefined()) fail(ErrorKind::kUndefined, callee.undefined_hint());
  if (!callee.is_callable()) fail(ErrorKind::kType, "'" + callee.type_name() + "' object is not callable");
  return callee.as_callable().call(args, *this);
}

Value Interpreter::call_macro(const Node& macro, const std::shared_ptr<Scope>& closure, const CallArgs& args,
                              const Value& caller) {
  if (call_depth_ >= limits_.max_call_depth)
    fail(ErrorKind::kLimit,
         "macro calls nested deeper than " + std::to_string(limits_.max_call_depth) + " (recursion)");
  count_iterations(1);
  charge(kWorkPerCall);
  const std::string what = macro.kind == Node::Kind::kMacro ? "macro " + quote(macro.text) : "caller()";
  if (args.positional.size() > macro.targets.size())
    fail(ErrorKind::kType, what + " takes " + std::to_string(macro.targets.size()) + " arguments, " +
                               std::to_string(args.positional.size()) + " given");
  const auto saved_scope = scope_;
  const int saved_line = line_;
  auto frame = std::make_shared<Scope>();
  frame->parent = closure;
  scope_ = frame;
  ++call_depth_;
  outputs_.emplace_back();
  try {
    for (size_t k = 0; k < macro.targets.size(); ++k) {
      const std::string& param = macro.targets[k];
      if (k < args.positional.size()) {
        frame->vars.set(param, args.positional[k]);
      } else if (const Value* v = args.named_arg(param)) {
        frame->vars.set(param, *v);
      } else if (k < macro.defaults.size() && macro.defaults[k]) {
        frame->vars.set(param, eval(*macro.defaults[k]));
      } else {
        frame->vars.set(param, Value::undefined("parameter '" + param + "' was not provided"));
      }
    }
    for (const auto& [name, value] : args.named) {
      if (name == "caller") {
        frame->vars.set("caller", value);
        continue;
      }
      if (std::find(macro.targets.begin(), macro.targets.end(), name) == macro.targets.end())
        fail(ErrorKind::kType, what + " takes no keyword argument " + quote(name));
    }
    if (!caller.is_undefined()) frame->vars.set("caller", caller);
    const Flow flow = exec_body(macro.body);
    if (flow != Flow::kNormal) fail(ErrorKind::kSyntax, "break or continue outside a for loop");
  } catch (...) {
    outputs_.pop_back();
    --call_depth_;
    scope_ = saved_scope;
    throw;
  }
  std::string text = std::move(outputs_.back());
  outputs_.pop_back();
  --call_depth_;
  scope_ = saved_scope;
  line_ = saved_line;
  return Value(std::move(text));
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t k = first; k < e.args.size(); ++k) {
    Value v = eval(*e.args[k]);
    const std::string& name = e.arg_names[k - 1];
    if (name.empty()) {
      args.positional.push_back(std::move(v));
    } else {
      args.named.emplace_back(name, std::move(v));
    }
  }
  return args;
}

Value Interpreter::eval(const Expr& e) {
  Value v = eval_node(e);
  // Nesting is bounded where values are built, so that printing or freeing one never runs out of stack.
  if (v.depth() > static_cast<uint32_t>(kMaxValueDepth))
    fail(ErrorKind::kLimit,
         "a list or dict nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  return v;
}

Value Interpreter::eval_node(const Expr& e) {
  line_ = e.line;
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kList: {
      List list;
      list.reserve(e.args.size());
      for (const ExprPtr& a : e.args) list.push_back(eval(*a));
      return Value(std::move(list));
    }
    case Expr::Kind::kDict: {
      Dict dict;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        const Value key = eval(*e.args[k]);
        if (!key.is_string()) fail(ErrorKind::kType, "dict keys must be strings, not " + key.type_name());
        dict.set(key.as_string(), eval(*e.args[k + 1]));
      }
      return Value(std::move(dict));
    }
    case Expr::Kind::kGetattr: {
      // `name.attribute` (message.content, loop.index0, ns.x: most of a chat template's lookups) reads the
      // name's value where it is stored, without copying it.
      if (e.args[0]->kind == Expr::Kind::kName) {
        if (const Value* obj = find_name(e.args[0]->name)) {
          line_ = e.line;
          return get_attribute(*this, *obj, e.name);
        }
      }
      const Value obj = eval(*e.args[0]);
      line_ = e.line;
      return get_attribute(*this, obj, e.name);
    }
    case Expr::Kind::kGetitem: {
      const Value obj = eval(*e.args[0]);
      const Value key = eval(*e.args[1]);
      line_ = e.line;
      return get_item(*this, obj, key);
    }
    case Expr::Kind::kSlice: {
      const Value obj = eval(*e.args[0]);
      Value parts[3];
      for (int k = 0; k < 3; ++k) {
        if (e.args[static_cast<size_t>(k) + 1]) parts[k] = eval(*e.args[static_cast<size_t>(k) + 1]);
      }
      line_ = e.line;
      Value out = get_slice(*this, obj, e.args[1] ? &parts[0] : nullptr, e.args[2] ? &parts[1] : nullptr,
                            e.args[3] ? &parts[2] : nullptr);
      charge_built(out);
      return out;
    }
    case Expr::Kind::kUnary: {
      const Value v = eval(*e.args[0]);
      line_ = e.line;
      if (e.name == "not") return Value(!v.truthy());
      if (v.is_undefined()) fail(ErrorKind::kUndefined, v.undefined_hint());
      if (!v.is_number())
        fail(ErrorKind::kType, "bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      if (e.name == "+") return v.is_float() ? Value(v.as_float()) : Value(v.as_int());
      if (v.is_float()) return Value(-v.as_float());
      if (v.as_int() == std::numeric_limits<int64_t>::min()) fail(ErrorKind::kType, "integer overflow");
      return Value(-v.as_int());
    }
    case Expr::Kind::kBinary:
      return eval_binary(e);
    case Expr::Kind::kCompare:
      return eval_compare(e);
    case Expr::Kind::kFilter:
      return eval_filter(e);
    case Expr::Kind::kTest:
      return Value(eval_test(e));
    case Expr::Kind::kCall: {
      const Value callee = eval(*e.args[0]);
      const CallArgs args = eval_args(e, 1);
      line_ = e.line;
      Value out = call(callee, args);
      charge_built(out);
      return out;
    }
    case Expr::Kind::kCondition:
      if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the condition was false and the if-expression has no else");
  }
  return Value();
}

Value Interpreter::eval_filter(const Expr& e) {
  const Value input = eval(*e.args[0]);
  const CallArgs args = eval_args(e, 1);
  line_ = e.line;
  Value out = apply_filter(*this, e.name, input, args);
  charge_built(out);
  return out;
}

bool Interpreter::eval_test(const Expr& e) {
  const Value input = eval(*e.args[0]);
  const CallArgs args = eval_args(e, 1);
  line_ = e.line;
  return apply_test(*this, e.name, input, args) != e.negated;
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.args[k + 1]);
    line_ = e.line;
    charge_read(left);  // what the comparison may read
    charge_read(right);
    bool r;
    switch (e.compare_ops[k]) {
      case Op::kEq:
        r = equal(left, right);
        break;
      case Op::kNe:
        r = !equal(left, right);
        break;
      case Op::kIn:
        r = contains(*this, right, left);
        break;
      case Op::kNotIn:
        r = !contains(*this, right, left);
        break;
      case Op::kLt:
        r = less(*this, left, right);
        break;
      case Op::kGt:
        r = less(*this, right, left);
        break;
      case Op::kLe:
        r = !less(*this, right, left);
        break;
      default:  // kGe
        r = !less(*this, left, right);
        break;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval_binary(const Expr& e) {
  const std::string& op = e.name;  // for messages
  if (e.op == Op::kAnd) {
    Value a = eval(*e.args[0]);
    return a.truthy() ? eval(*e.args[1]) : a;
  }
  if (e.op == Op::kOr) {
    Value a = eval(*e.args[0]);
    return a.truthy() ? a : eval(*e.args[1]);
  }
  Value a = eval(*e.args[0]);
  const Value b = eval(*e.args[1]);
  line_ = e.line;
  // A string built by the left operand and held by nothing else is appended to in place.
  const auto append = [&](std::string& left, const std::string& right) {
    check_size(left.size() + right.size(), "string");
    charge(right.size());  // appended in place: only the new bytes are copied
    left += right;
  };
  if (e.op == Op::kConcat) {
    if (std::string* left = a.unique_string()) {
      append(*left, b.is_string() ? b.as_string() : b.str());
      return a;
    }
    std::string s = a.str();
    charge(s.size());
    append(s, b.is_string() ? b.as_string() : b.str());
    return Value(std::move(s));
  }
  if (a.is_undefined()) fail(ErrorKind::kUndefined, a.undefined_hint());
  if (b.is_undefined()) fail(ErrorKind::kUndefined, b.undefined_hint());
  const auto type_error = [&]() {
    fail(ErrorKind::kType,
         "unsupported operand types for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  if (e.op == Op::kAdd) {
    if (a.is_string() && b.is_string()) {
      if (std::string* left = a.unique_string()) {
        append(*left, b.as_string());
        return a;
      }
      check_size(a.as_string().size() + b.as_string().size(), "string");
      charge(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      check_size(a.as_list().size() + b.as_list().size(), "list");
      charge((a.as_list().size() + b.as_list().size()) * kWorkPerItem);
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out));
    }
  }
  if (e.op == Op::kMul && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = a.is_string() || a.is_list() ? a : b;
    const Value& count = a.is_string() || a.is_list() ? b : a;
    if (!count.is_int() && !count.is_bool()) type_error();
    const int64_t n = std::max<int64_t>(0, count.as_int());
    const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
    if (unit > 0 && static_cast<uint64_t>(n) > limits_.max_output_bytes / unit + 1)
      check_size(limits_.max_output_bytes + 1, seq.is_string() ? "string" : "list");
    check_size(unit * static_cast<size_t>(n), seq.is_string() ? "string" : "list");
    charge(unit * static_cast<uint64_t>(n) * (seq.is_string() ? 1 : kWorkPerItem));
    if (seq.is_string()) {
      std::string out;
      out.reserve(unit * static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) out += seq.as_string();
      return Value(std::move(out));
    }
    List out;
    for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
    return Value(std::move(out));
  }
  if (!a.is_number() || !b.is_number()) type_error();
  const bool floats = a.is_float() || b.is_float();
  if (e.op == Op::kDiv) {
    if (b.as_float() == 0) fail(ErrorKind::kType, "division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (floats) {
    const double x = a.as_float(), y = b.as_float();
    if (e.op == Op::kAdd) return Value(x + y);
    if (e.op == Op::kSub) return Value(x - y);
    if (e.op == Op::kMul) return Value(x * y);
    if (e.op == Op::kPow) return Value(std::pow(x, y));
    if (y == 0) fail(ErrorKind::kType, "float division by zero");
    if (e.op == Op::kFloorDiv) return Value(std::floor(x / y));
    if (e.op == Op::kMod) {
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
  }
  const int64_t x = a.as_int(), y = b.as_int();
  int64_t r = 0;
  if (e.op == Op::kAdd) {
    if (!checked_add(x, y, r)) fail(ErrorKind::kType, "integer overflow");
    return Value(r);
  }
  if (e.op == Op::kSub) {
    if (__builtin_sub_overflow(x, y, &r)) fail(ErrorKind::kType, "integer overflow");
    return Value(r);
  }
  if (e.op == Op::kMul) {
    if (!checked_mul(x, y, r)) fail(ErrorKind::kType, "integer overflow");
    return Value(r);
  }
  if (e.op == Op::kPow) {
    if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
    if (x == 0 || x == 1) return Value(y == 0 ? int64_t{1} : x);
    if (x == -1) return Value(y % 2 ? int64_t{-1} : int64_t{1});
    r = 1;  // |x| >= 2: at most 63 steps before an overflow
    for (int64_t k = 0; k < y; ++k) {
      if (!checked_mul(r, x, r)) fail(ErrorKind::kType, "integer overflow");
    }
    return Value(r);
  }
  if (y == 0) fail(ErrorKind::kType, "integer division or modulo by zero");
  if (x == std::numeric_limits<int64_t>::min() && y == -1) fail(ErrorKind::kType, "integer overflow");
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
    --q;
    m += y;
  }
  return e.op == Op::kFloorDiv ? Value(q) : Value(m);
}

}  // namespace crl::jinja
